// CPU seconds the PostgreSQL server has spent, read from /proc: the sum of user and system time
// of every live `postgres` process plus what exited backends left in their parent's counters.
// Only meaningful when the server runs on this machine (as here); null when none is visible.
// Unlike a rate, CPU per job barely moves with the machine's noise, so it shows where the
// database's work goes.
import { readdirSync, readFileSync } from 'node:fs';

const TICKS = 100; // USER_HZ on Linux

export function serverCpuSeconds(): number | null {
  let total = 0;
  let seen = 0;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return null;
  }
  for (const pid of entries) {
    if (!/^\d+$/.test(pid)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // exited between readdir and read
    }
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    if (!comm.startsWith('postgres')) continue;
    // Fields after "(comm) ": state is [0]; utime, stime, cutime, cstime are [11..14].
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    total += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / TICKS;
    seen++;
  }
  return seen ? total : null;
}
