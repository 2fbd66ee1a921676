// Input schemas shared by the API routes and the panel pages: list filters from the query
// string, id lists from JSON or forms. Parsing errors become 400s naming the parameter.
import { z } from 'zod';
import { isoTimeMs, JOB_KIND_PROBLEM, JOB_LIST_KINDS } from '../core/filters.js';
import { isJobId, MAX_JOB_ID } from '../core/job-id.js';
import { EVENT_STATES } from '../driver/admin.js';
import { JOB_STATES } from '../driver/types.js';
import { WebhookSecretError } from '../channels/webhook/errors.js';
import { badRequest, HttpError } from './http.js';

const text = z.string().max(500);
/**
 * A subject or trace id to match: stored ones have no cap (record() takes any text), so neither
 * has the filter, or the panel's own link to a long one answered 400. The request line bounds it.
 */
const storedText = z.string();
export const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID');
const jobId = z.string().refine(isJobId, `must be a job id (1 to ${MAX_JOB_ID})`);
/** A page cursor that is a job or attempt id: the nextCursor of the previous page. */
export const idCursor = z.string().refine(isJobId, 'must be the nextCursor of a previous page');
const limit = z.coerce.number({ message: 'must be a number' }).int('must be a whole number').min(1, 'must be at least 1').max(500, 'must be at most 500');
const isoTime = z.string().refine((v) => Number.isFinite(isoTimeMs(v)), 'must be an ISO 8601 timestamp such as 2025-01-31T12:00:00Z, of a day that exists');

export const eventListQuery = z.object({
  type: text.regex(/^(\*|[A-Za-z0-9_.:-]+(\.\*)?)$/, 'must be an event type or a prefix.* pattern').optional(),
  subject: storedText.optional(),
  traceId: storedText.optional(),
  state: z.enum(EVENT_STATES as [string, ...string[]], { message: `must be one of ${EVENT_STATES.join(', ')}` }).optional(),
  since: isoTime.optional(),
  until: isoTime.optional(),
  cursor: uuid.optional(),
  limit: limit.optional(),
}).strict();

export const jobListQuery = z.object({
  state: z.enum(JOB_STATES as [string, ...string[]], { message: `must be one of ${JOB_STATES.join(', ')}` }).optional(),
  kind: z.enum(JOB_LIST_KINDS, { message: JOB_KIND_PROBLEM }).optional(),
  handler: text.optional(),
  eventId: uuid.optional(),
  cursor: idCursor.optional(),
  limit: limit.optional(),
}).strict();

export const endpointListQuery = z.object({
  state: z.enum(['enabled', 'failing', 'disabled'], { message: 'must be enabled, failing or disabled' }).optional(),
  /** The nextCursor of the previous page: an endpoint id. */
  cursor: uuid.optional(),
  limit: z.coerce.number({ message: 'must be a number' }).int('must be a whole number').min(1, 'must be at least 1').max(1000, 'must be at most 1000').optional(),
}).strict();

const oneOrMany = <T extends z.ZodType>(item: T) => z.union([item, z.array(item).min(1).max(1000)]).transform((v) => (Array.isArray(v) ? v : [v]) as z.output<T>[]);

export const eventIds = oneOrMany(uuid);
export const jobIds = oneOrMany(jobId);

/** A path parameter that must be a UUID (event and endpoint ids). */
export function uuidParam(value: string | undefined, name = 'id'): string {
  const r = uuid.safeParse(value);
  if (!r.success) throw badRequest(name, 'must be a UUID');
  return r.data.toLowerCase();
}

export function jobIdParam(value: string | undefined, name = 'id'): string {
  const r = jobId.safeParse(value);
  if (!r.success) throw badRequest(name, `must be a job id (1 to ${MAX_JOB_ID})`);
  return r.data;
}

/**
 * A switch that asks for a bulk action: JSON sends true, forms 'true'/'on'/'1'. Anything else,
 * false above all, is refused: taken as "on", `{ poisoned: false }` requeued every poisoned event.
 */
export const flag = z.union([z.literal(true), z.enum(['true', 'on', '1'])], { message: 'must be true (or left out)' }).transform(() => true as const);

/** A secret given to create or rotate that bus.endpoints refuses: a 400 naming the `secret` parameter (its message never holds the secret). */
export async function secretChecked<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    if (err instanceof WebhookSecretError) throw new HttpError(400, err.code, err.message, 'secret');
    throw err;
  }
}
