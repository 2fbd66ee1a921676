// Standard Webhooks signing: HMAC-SHA256 over "id.timestamp.body", one `v1,` signature per
// active secret so receivers keep verifying while a secret is being rotated.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { OptionsError } from '../../core/errors.js';
import { parseSecret } from './secret.js';

export interface SignInput {
  /** The delivery's id: the same on every retry of one delivery, so receivers can dedupe. */
  msgId: string;
  /** Unix seconds. */
  timestamp: number;
  /** The exact bytes that will be sent, as a string. */
  body: string;
  /** Every currently valid secret (`whsec_…`); newest first by convention. */
  secrets: readonly string[];
}

// A type alias, not an interface, so it can be passed straight to deliver({ headers }).
export type SignedHeaders = {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
};

// A header value that cannot carry a newline or the separators the signed content uses.
const MSG_ID = /^[\x21-\x7e]{1,255}$/;

function checkIdAndTimestamp(msgId: string, timestamp: number): void {
  if (typeof msgId !== 'string' || !MSG_ID.test(msgId)) throw new OptionsError('msgId', 'must be 1–255 printable ASCII characters without spaces');
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) throw new OptionsError('timestamp', `must be whole unix seconds ≥ 0, got ${timestamp}`);
}

function sign(key: Buffer, msgId: string, timestamp: number, body: string | Uint8Array): string {
  const hmac = createHmac('sha256', key).update(`${msgId}.${timestamp}.`, 'utf8');
  return (typeof body === 'string' ? hmac.update(body, 'utf8') : hmac.update(body)).digest('base64');
}

export function signPayload(input: SignInput): SignedHeaders {
  const { msgId, timestamp, body, secrets } = input;
  checkIdAndTimestamp(msgId, timestamp);
  if (typeof body !== 'string') throw new OptionsError('body', 'must be the request body as a string');
  if (!Array.isArray(secrets) || secrets.length === 0) throw new OptionsError('secrets', 'at least one secret is required');
  const signatures = secrets.map((s) => `v1,${sign(parseSecret(s), msgId, timestamp, body)}`);
  return {
    'webhook-id': msgId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signatures.join(' '),
  };
}

export interface VerifyInput {
  headers: Readonly<Record<string, string | string[] | undefined>>;
  /** The raw body as received: a string, or its bytes (a Buffer). */
  body: string | Uint8Array;
  secrets: readonly string[];
  /** Unix seconds; defaults to the current time. */
  now?: number;
  /** How far the timestamp may be from `now`, either way. */
  toleranceSeconds?: number;
}

export const DEFAULT_VERIFY_TOLERANCE_SECONDS = 5 * 60;

/**
 * The receiver's side, for rea's own demo receiver and `endpoints test`: true when any `v1`
 * signature matches any secret and the timestamp is fresh. A secret may be given as `whsec_…` or
 * as its base64 alone (as the standardwebhooks library takes it). Never throws on bad input: a
 * secret that is neither (or decodes to fewer than MIN_SECRET_BYTES) matches nothing.
 */
export function verifyPayload(input: VerifyInput): boolean {
  // A body parsed to an object (a JSON body parser ran first), missing headers or secrets: false,
  // not a TypeError from deep inside the HMAC or Object.entries in the receiver's request handler.
  if (input === null || typeof input !== 'object') return false;
  if (typeof input.body !== 'string' && !(input.body instanceof Uint8Array)) return false;
  if (input.headers === null || typeof input.headers !== 'object' || !Array.isArray(input.secrets)) return false;
  const header = (name: string): string | undefined => {
    for (const [k, v] of Object.entries(input.headers)) if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] : v;
    return undefined;
  };
  const msgId = header('webhook-id');
  const ts = header('webhook-timestamp');
  const sigs = header('webhook-signature');
  if (!msgId || !ts || !sigs || !/^\d+$/.test(ts)) return false;
  const timestamp = Number(ts);
  const now = input.now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - timestamp) > (input.toleranceSeconds ?? DEFAULT_VERIFY_TOLERANCE_SECONDS)) return false;
  const offered = sigs.split(' ').filter((s) => s.startsWith('v1,')).map((s) => Buffer.from(s.slice(3), 'utf8'));
  for (const secret of input.secrets) {
    let key: Buffer;
    try {
      key = parseSecret(secret, { bare: true });
    } catch {
      continue;
    }
    const expected = Buffer.from(sign(key, msgId, timestamp, input.body), 'utf8');
    if (offered.some((o) => o.length === expected.length && timingSafeEqual(o, expected))) return true;
  }
  return false;
}
