#include "drover/common/status.h"

namespace drover {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kCancelled: return "cancelled";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kDeadlineExceeded: return "deadline exceeded";
    case Code::kNotFound: return "not found";
    case Code::kAlreadyExists: return "already exists";
    case Code::kPermissionDenied: return "permission denied";
    case Code::kResourceExhausted: return "resource exhausted";
    case Code::kFailedPrecondition: return "failed precondition";
    case Code::kAborted: return "aborted";
    case Code::kOutOfRange: return "out of range";
    case Code::kUnimplemented: return "unimplemented";
    case Code::kInternal: return "internal";
    case Code::kUnavailable: return "unavailable";
    case Code::kUnauthenticated: return "unauthenticated";
  }
  return "unknown";
}

// The mapping of google.rpc.Code to HTTP used by grpc-gateway, except that an
// oversized request is 413 (the REST layer reports that itself).
int HttpStatusFor(Code code) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kCancelled: return 499;
    case Code::kInvalidArgument: return 400;
    case Code::kDeadlineExceeded: return 504;
    case Code::kNotFound: return 404;
    case Code::kAlreadyExists: return 409;
    case Code::kPermissionDenied: return 403;
    case Code::kResourceExhausted: return 429;
    case Code::kFailedPrecondition: return 400;
    case Code::kAborted: return 409;
    case Code::kOutOfRange: return 400;
    case Code::kUnimplemented: return 501;
    case Code::kInternal: return 500;
    case Code::kUnavailable: return 503;
    case Code::kUnauthenticated: return 401;
  }
  return 500;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace drover
