// Job ids (a webhook delivery is a job) and attempt ids are PostgreSQL bigints, carried as
// decimal strings so JavaScript loses no digits. One check for all of them, everywhere.

/** The largest bigint: 19 digits, but not every 19-digit number is below it. */
export const MAX_JOB_ID = '9223372036854775807';

/**
 * A positive bigint in decimal without leading zeros: 1 … 9223372036854775807. Digits alone are
 * not enough: 9999999999999999999 passed a digits-only check and then failed in the database's
 * cast, a 500 in the API and an unexpected error in the CLI, instead of a refusal naming the input.
 */
export function isJobId(value: unknown): value is string {
  if (typeof value !== 'string' || !/^[1-9][0-9]{0,18}$/.test(value)) return false;
  // Equal lengths compare as numbers when compared as strings.
  return value.length < MAX_JOB_ID.length || value <= MAX_JOB_ID;
}
