// Standard Webhooks secrets: `whsec_` + base64 key bytes. rea generates them, checks the ones
// it is given, and shows only a short hint so a stored secret is never read back in full.
import { randomBytes } from 'node:crypto';
import { WebhookSecretError } from './errors.js';

export const SECRET_PREFIX = 'whsec_';
/** Bytes of key material in a secret rea generates. */
export const GENERATED_SECRET_BYTES = 32;
/** The fewest key bytes rea accepts in a secret it is given (the "≥ 24 random bytes"). */
export const MIN_SECRET_BYTES = 24;

// Standard base64 alphabet, padding optional (the spec's own example secret has none).
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

export function generateSecret(): string {
  return SECRET_PREFIX + randomBytes(GENERATED_SECRET_BYTES).toString('base64');
}

/**
 * Checks a secret's shape and returns its key bytes; throws WebhookSecretError (without the secret).
 * `bare: true` (verifying, as the standardwebhooks library does) also takes the key's base64
 * without the `whsec_` prefix; a secret rea stores or signs with has it (see storedSecret).
 */
export function parseSecret(secret: string, options: { bare?: boolean } = {}): Buffer {
  if (typeof secret !== 'string') throw new WebhookSecretError(`expected a string, got ${secret === null ? 'null' : typeof secret}`);
  const prefixed = secret.startsWith(SECRET_PREFIX);
  if (!prefixed && !options.bare) throw new WebhookSecretError(`must start with '${SECRET_PREFIX}'`);
  const encoded = prefixed ? secret.slice(SECRET_PREFIX.length) : secret;
  // Buffer.from(…, 'base64') skips characters it does not know, so check the alphabet first.
  if (encoded.length === 0 || !BASE64.test(encoded) || encoded.length % 4 === 1) {
    throw new WebhookSecretError(prefixed ? `the part after '${SECRET_PREFIX}' must be standard base64` : `must be '${SECRET_PREFIX}' and standard base64, or the base64 alone`);
  }
  const key = Buffer.from(encoded, 'base64');
  if (key.length < MIN_SECRET_BYTES) {
    throw new WebhookSecretError(`decodes to ${key.length} bytes; at least ${MIN_SECRET_BYTES} are required`);
  }
  return key;
}

/**
 * A secret given to create or rotateSecret, in the one form rea stores, signs with and returns:
 * `whsec_` + the base64 as given. It may come as the base64 alone, as verifyPayload and the
 * Standard Webhooks libraries take it (before, create and rotateSecret refused that form), so the
 * same key verifies whichever form the receiver holds. Throws WebhookSecretError, naming the problem and
 * never the secret, for one that is not base64 or decodes to fewer than MIN_SECRET_BYTES.
 */
export function storedSecret(given: unknown): string {
  parseSecret(given as string, { bare: true });
  const secret = given as string;
  return secret.startsWith(SECRET_PREFIX) ? secret : SECRET_PREFIX + secret;
}

/**
 * The last 4 characters before the base64 padding, for showing which secret is which; '' when the
 * input is too short to hint safely. The last 4 of a generated secret (32 bytes: 43 characters and
 * one '=') always ended in '=', so they told only 3 characters apart.
 */
export function secretHint(secret: string): string {
  return typeof secret === 'string' && secret.length >= 16 ? secret.replace(/=+$/, '').slice(-4) : '';
}
