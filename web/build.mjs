// Bundles the dashboard: node build.mjs OUT_DIR
//
// Writes OUT_DIR/index.html, OUT_DIR/app-<hash>.js and OUT_DIR/app-<hash>.css
// (uPlot's stylesheet included) and nothing else; OUT_DIR is emptied first.
// The content hash in the names lets the server cache them forever while
// index.html is always revalidated. Runs offline: everything comes from
// node_modules (see scripts/build-web.sh, which installs it with npm ci).
import { build } from 'esbuild';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error('usage: node build.mjs OUT_DIR');
  process.exit(2);
}
const outDir = resolve(out);
rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });

const result = await build({
  entryPoints: { app: join(here, 'src', 'main.js') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2020',
  entryNames: '[name]-[hash]',
  outdir: outDir,
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});

const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = outputs.find((p) => p.endsWith('.js'));
const css = outputs.find((p) => p.endsWith('.css'));
if (!js || !css) {
  console.error(`build.mjs: expected one .js and one .css output, got ${outputs.join(', ')}`);
  process.exit(1);
}
const html = readFileSync(join(here, 'src', 'index.html'), 'utf8')
  .replace('%APP_CSS%', css)
  .replace('%APP_JS%', js);
if (html.includes('%APP_')) {
  console.error('build.mjs: index.html has an unreplaced %APP_...% placeholder');
  process.exit(1);
}
writeFileSync(join(outDir, 'index.html'), html);
console.log(`web dashboard: ${outDir}/{index.html,${js},${css}}`);
