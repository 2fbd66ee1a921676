/** Exit codes: 1 when the work failed (the database, a failed check, a named item left alone), 2 when the command line was wrong. */
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;
