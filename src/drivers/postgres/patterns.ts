// Handler patterns ('order.created', 'order.*', '*') as SQL LIKE patterns with '\' as the escape.

export function patternToLike(pattern: string): string {
  return pattern
    .split('*')
    .map((part) => part.replace(/[\\%_]/g, (c) => `\\${c}`))
    .join('%');
}
