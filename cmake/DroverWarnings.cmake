add_library(drover_warnings INTERFACE)
target_compile_options(drover_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough
  $<$<BOOL:${DROVER_WERROR}>:-Werror>)

option(DROVER_SANITIZE "build with address and undefined-behaviour sanitizers" OFF)
if(DROVER_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
