// Run the CLI in this process, as `rea <args>` would from a shell: what it prints to stdout and
// stderr (console.log / console.error), and the exit code it sets.
import { vi } from 'vitest';
import { main } from '../../src/cli/main.js';

export async function rea(...args: string[]): Promise<{ out: string; err: string; code: number }> {
  const out: string[] = [];
  const err: string[] = [];
  const log = vi.spyOn(console, 'log').mockImplementation((...m: unknown[]) => void out.push(m.join(' ')));
  const error = vi.spyOn(console, 'error').mockImplementation((...m: unknown[]) => void err.push(m.join(' ')));
  const before = process.exitCode;
  process.exitCode = undefined;
  try {
    await main(['node', 'rea', ...args]);
    return { out: out.join('\n'), err: err.join('\n'), code: Number(process.exitCode ?? 0) };
  } finally {
    log.mockRestore();
    error.mockRestore();
    process.exitCode = before;
  }
}
