// How rea's SQL writes a time into JSON it stores (a job's error entries): as JavaScript's
// toISOString() writes one, in UTC with milliseconds and a Z, whatever the session's TimeZone.
// A timestamptz put in jsonb as it is came out as `2026-12-07T07:31:02.123456+01:00` beside the
// entries the worker dated itself (`2026-12-07T06:31:02.123Z`): one job's list mixed both.

/** `expr` (a timestamptz) as JSON text in the form toISOString() gives. */
export const isoTime = (expr: string) => /* sql */ `to_char((${expr}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
