// Turning anything a handler or the database throws into a bounded, storable description.

const MAX_MESSAGE = 2000;
const MAX_STACK = 4000;

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return truncate(err.message || err.name, MAX_MESSAGE);
  if (typeof err === 'string') return truncate(err, MAX_MESSAGE);
  try {
    const json = JSON.stringify(err);
    return truncate(json === undefined ? String(err) : `non-Error thrown: ${json}`, MAX_MESSAGE);
  } catch {
    return truncate(`non-Error thrown: ${String(err)}`, MAX_MESSAGE);
  }
}

export function errorName(err: unknown): string {
  if (err instanceof Error) return err.name;
  return typeof err;
}

export function errorStack(err: unknown): string | undefined {
  return err instanceof Error && err.stack ? truncate(err.stack, MAX_STACK) : undefined;
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}
