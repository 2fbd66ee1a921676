// Figures as people read them, shared by the CLI and the panel so both say the same thing.

/** Bytes in binary units (1 KiB = 1024 B), named as such: `512 B`, `8.0 KiB`, `152 KiB`, `1.5 MiB`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** `1 job`, `2 jobs`; `many` for nouns that do not just take an s (`1 batch`, `2 batches`). */
export function plural(n: number, noun: string, many = `${noun}s`): string {
  return `${n} ${n === 1 ? noun : many}`;
}
