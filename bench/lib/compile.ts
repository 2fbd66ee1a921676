// Figures 1 and 7 run each system's worker as compiled JavaScript under plain `node`, as production
// does: under the tsx loader every TypeScript file of rea (and none of the peers' published
// JavaScript) is transformed in memory, which inflated rea's RSS by tens of MB. tsc compiles src/
// and bench/ into bench/.build/ once per harness run.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

let compiled: string | undefined;

/** Path of the compiled worker child; compiles on first use (a few seconds). */
export function compiledWorkerChild(): string {
  if (compiled) return compiled;
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const project = fileURLToPath(new URL('../tsconfig.child.json', import.meta.url));
  execFileSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
  compiled = fileURLToPath(new URL('../.build/bench/worker-child.js', import.meta.url));
  return compiled;
}
