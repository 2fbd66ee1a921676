// Event and job list filters: validated here, once, for the bus, the HTTP API and the CLI. A bad
// filter is an InvalidFilterError naming the parameter; time bounds become UUIDv7 id bounds so
// a time range is a range scan on the primary key.
import type { EventListParams, EventState, JobListParams } from '../driver/admin.js';
import { EVENT_STATES } from '../driver/admin.js';
import { JOB_STATES, type JobKind, type JobState } from '../driver/types.js';
import { InvalidFilterError } from './errors.js';
import { isJobId } from './job-id.js';
import { unstorableText } from './json.js';
import { normalizeTraceId } from './trace.js';

export const LIST_LIMIT = { default: 50, max: 500 } as const;
/**
 * The kinds of job rea makes, which a list can be filtered by. `forward` (to a message broker) is
 * a kind the tables leave room for, but nothing makes such a job yet: offered as a filter, it
 * looked like a delivery rea had, whose jobs were simply never there.
 */
export const JOB_LIST_KINDS = ['handler', 'webhook'] as const satisfies readonly JobKind[];
export type ListedJobKind = (typeof JOB_LIST_KINDS)[number];
export const JOB_KIND_PROBLEM = `must be one of ${JOB_LIST_KINDS.join(', ')} (forwarding to a message broker is not built yet: no job has kind forward)`;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TYPE_PATTERN = /^(\*|[A-Za-z0-9_.:-]+(\.\*)?)$/;

export interface EventListFilter {
  /** An exact type or a `prefix.*` pattern. */
  type?: string;
  subject?: string;
  traceId?: string;
  state?: EventState;
  /** Recorded at or after (Date or ISO 8601 text). */
  since?: Date | string;
  /** Recorded before. */
  until?: Date | string;
  /** `nextCursor` of the previous page. */
  cursor?: string;
  /** 1–500, default 50. */
  limit?: number;
}

export interface JobListFilter {
  state?: JobState;
  /** handler or webhook (no job has kind forward yet). */
  kind?: ListedJobKind;
  /** Handler name (webhook jobs: endpoint id). */
  handler?: string;
  eventId?: string;
  cursor?: string;
  limit?: number;
}

/**
 * The keys each filter takes, complete (a Record of every key of its type) so a key added to the
 * type must be added here. A key a filter does not know (`typ`, `handlr`) was ignored, and the
 * call went on unfiltered: a list returned every row, a retry retried every dead letter.
 */
const EVENT_LIST_KEYS: Record<keyof EventListFilter, true> = { type: true, subject: true, traceId: true, state: true, since: true, until: true, cursor: true, limit: true };
const JOB_LIST_KEYS: Record<keyof JobListFilter, true> = { state: true, kind: true, handler: true, eventId: true, cursor: true, limit: true };

/** InvalidFilterError naming the first key of `filter` that `known` lacks; `what` is the filter ('an events list', 'a replay'). */
export function rejectUnknownFilterKeys(filter: object, known: Readonly<Record<string, true>>, what: string): void {
  const unknown = Object.keys(filter).find((key) => !Object.hasOwn(known, key));
  if (unknown === undefined) return;
  const keys = Object.keys(known);
  throw new InvalidFilterError(unknown, `is not ${what} filter: give ${keys.slice(0, -1).join(', ')}${keys.length > 1 ? ' or ' : ''}${keys.at(-1)}`);
}

export interface Page<T> {
  items: T[];
  /** Pass as `cursor` for the next (older) page; null on the last page. */
  nextCursor: string | null;
}

export function isUuid(v: unknown): v is string {
  return typeof v === 'string' && UUID.test(v);
}

/** The smallest UUIDv7 whose timestamp is `ms`: ids at or after the instant compare ≥ it. */
export function uuidv7Floor(ms: number): string {
  const hex = Math.max(0, Math.min(ms, 2 ** 48 - 1)).toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7000-8000-000000000000`;
}

export function eventListParams(filter: EventListFilter = {}): EventListParams {
  if (filter === null || typeof filter !== 'object') throw new InvalidFilterError('filter', 'must be an object');
  rejectUnknownFilterKeys(filter, EVENT_LIST_KEYS, 'an events list');
  const type = optionalText(filter.type, 'type');
  if (type !== null && !TYPE_PATTERN.test(type)) {
    throw new InvalidFilterError('type', `"${type}" is not an event type or a prefix.* pattern`);
  }
  const state = filter.state ?? null;
  if (state !== null && !EVENT_STATES.includes(state)) {
    throw new InvalidFilterError('state', `must be one of ${EVENT_STATES.join(', ')}`);
  }
  const since = optionalTime(filter.since, 'since');
  const until = optionalTime(filter.until, 'until');
  if (since !== null && until !== null && since >= until) throw new InvalidFilterError('until', 'must be later than since');
  const cursor = filter.cursor ?? null;
  if (cursor !== null && !isUuid(cursor)) throw new InvalidFilterError('cursor', 'must be the nextCursor of a previous page (an event id)');
  return {
    typePattern: type,
    // Any length: record() stores subjects and trace ids of any length, and a filter capped shorter
    // could not find them (the panel's own link to a long trace id answered 400).
    subject: optionalText(filter.subject, 'subject', Number.POSITIVE_INFINITY),
    // As record() stores it: a W3C trace id in lower case, so the id as given finds its events.
    traceId: traceIdFilter(optionalText(filter.traceId, 'traceId', Number.POSITIVE_INFINITY)),
    state,
    minId: since === null ? null : uuidv7Floor(since),
    maxId: until === null ? null : uuidv7Floor(until),
    beforeId: cursor === null ? null : cursor.toLowerCase(),
    limit: limitOf(filter.limit),
  };
}

export function jobListParams(filter: JobListFilter = {}): JobListParams {
  if (filter === null || typeof filter !== 'object') throw new InvalidFilterError('filter', 'must be an object');
  rejectUnknownFilterKeys(filter, JOB_LIST_KEYS, 'a jobs list');
  const state = filter.state ?? null;
  if (state !== null && !JOB_STATES.includes(state)) throw new InvalidFilterError('state', `must be one of ${JOB_STATES.join(', ')}`);
  const kind = filter.kind ?? null;
  if (kind !== null && !(JOB_LIST_KINDS as readonly string[]).includes(kind)) throw new InvalidFilterError('kind', JOB_KIND_PROBLEM);
  const eventId = filter.eventId ?? null;
  if (eventId !== null && !isUuid(eventId)) throw new InvalidFilterError('eventId', 'must be an event id (a UUID)');
  const cursor = filter.cursor ?? null;
  if (cursor !== null && !isJobId(cursor)) throw new InvalidFilterError('cursor', 'must be the nextCursor of a previous page (a job id)');
  return { state, kind, target: optionalText(filter.handler, 'handler'), eventId, beforeId: cursor, limit: limitOf(filter.limit) };
}

/** Fetch one row more than asked: its presence says there is a next page, without a count. */
export function pageOf<T extends { id: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  return { items, nextCursor: rows.length > limit ? items[items.length - 1]!.id : null };
}

function limitOf(v: unknown): number {
  if (v === undefined || v === null) return LIST_LIMIT.default;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > LIST_LIMIT.max) {
    throw new InvalidFilterError('limit', `must be a whole number from 1 to ${LIST_LIMIT.max}`);
  }
  return v;
}

function traceIdFilter(v: string | null): string | null {
  return v === null ? null : normalizeTraceId(v);
}

function optionalText(v: unknown, name: string, maxLength = 500): string | null {
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string') throw new InvalidFilterError(name, 'must be a string');
  if (v.length > maxLength) throw new InvalidFilterError(name, `must be at most ${maxLength} characters`);
  // PostgreSQL refuses a NUL in a text parameter ("invalid byte sequence"): a 500 from the API and
  // the panel. No stored value holds one, so the filter could match nothing anyway.
  if (unstorableText(v)) throw new InvalidFilterError(name, 'holds a NUL character (\\u0000) or a lone UTF-16 surrogate, which no stored text holds');
  return v;
}

function optionalTime(v: unknown, name: string): number | null {
  if (v === undefined || v === null || v === '') return null;
  const ms = v instanceof Date ? v.getTime() : typeof v === 'string' ? isoTimeMs(v) : NaN;
  if (!Number.isFinite(ms)) throw new InvalidFilterError(name, 'must be a date or an ISO 8601 timestamp (2025-01-31T12:00:00Z) of a day that exists');
  return ms;
}

/**
 * An ISO 8601 date or timestamp as epoch ms, NaN when it is not one. Date.parse rolls a day the
 * month does not have over into the next month (2025-02-30 is 2 March), so a typo would move
 * the bound silently; such a date is refused here. Out-of-range hours and minutes it refuses itself.
 */
export function isoTimeMs(text: string): number {
  const m = /^(\d{4})-(\d{2})-(\d{2})/.exec(text);
  if (!m) return NaN;
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  if (date.getUTCFullYear() !== year || date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day) return NaN;
  return Date.parse(text);
}
