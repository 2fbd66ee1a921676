// rea runs in the harness as compiled JavaScript, as production runs it: under the tsx loader every
// TypeScript file of rea (and none of the peers' published JavaScript) is transformed in memory,
// which inflated the figure-1 worker's RSS by tens of MB, and esbuild's output wraps each named
// function in a __name call that costs CPU in figures 2–4. tsc compiles src/ and bench/ into
// bench/.build/ once per harness run.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

let compiled = false;

function compileOnce(): void {
  if (compiled) return;
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const project = fileURLToPath(new URL('../tsconfig.child.json', import.meta.url));
  execFileSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
  compiled = true;
}

/** Path of the compiled worker child of figures 1 and 7; compiles on first use (a few seconds). */
export function compiledWorkerChild(): string {
  compileOnce();
  return fileURLToPath(new URL('../.build/bench/worker-child.js', import.meta.url));
}

/** URL of rea's compiled public entry point (src/index.ts), for the harness's own process. */
export function compiledReaEntry(): string {
  compileOnce();
  return new URL('../.build/src/index.js', import.meta.url).href;
}
