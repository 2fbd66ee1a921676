// Prints this process's resident memory right after start-up: run under `--import tsx` it shows
// what the TypeScript loader alone costs, so figure 7 can be read net of the harness.
import { readFileSync } from 'node:fs';

const hwm = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync('/proc/self/status', 'utf8'));
console.log(JSON.stringify({ rss: process.memoryUsage().rss, vmHwm: hwm ? Number(hwm[1]) * 1024 : null }));
