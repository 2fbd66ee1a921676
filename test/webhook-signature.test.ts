import { describe, it, expect } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { generateSecret, parseSecret, secretHint, MIN_SECRET_BYTES } from '../src/channels/webhook/secret.js';
import { signPayload, verifyPayload } from '../src/channels/webhook/signature.js';
import { WebhookSecretError } from '../src/channels/webhook/errors.js';
import { ReaError } from '../src/core/errors.js';

// Published in the Standard Webhooks reference library's tests ("sign function works").
const VECTOR = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  msgId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};

const now = () => Math.floor(Date.now() / 1000);

describe('webhook secrets', () => {
  it('generates whsec_ + base64 of 32 random bytes, each one different', () => {
    const a = generateSecret();
    const b = generateSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(parseSecret(a)).toHaveLength(32);
    expect(a).not.toBe(b);
  });

  it('accepts the spec secret (24 bytes, unpadded)', () => {
    expect(parseSecret(VECTOR.secret)).toHaveLength(MIN_SECRET_BYTES);
  });

  it.each([
    ['no prefix', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', /must start with 'whsec_'/],
    ['empty body', 'whsec_', /standard base64/],
    ['not base64', 'whsec_MfKQ9r8GKYqrTwjU!D8ILPZIo2LaLaSw', /standard base64/],
    ['url-safe alphabet', 'whsec_MfKQ9r8GKYqrTwjU-D8ILPZIo2LaLaSw', /standard base64/],
    ['too short', 'whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwc=', /decodes to 20 bytes; at least 24/],
  ])('refuses %s with a typed error that does not contain the secret', (_label, secret, message) => {
    let caught: unknown;
    try {
      parseSecret(secret);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(WebhookSecretError);
    expect(caught).toBeInstanceOf(ReaError);
    const e = caught as WebhookSecretError;
    expect(e.code).toBe('ERR_WEBHOOK_SECRET');
    expect(e.message).toMatch(message);
    const body = secret.replace(/^whsec_/, '');
    if (body.length > 0) expect(`${e.message} ${e.stack}`).not.toContain(body);
  });

  it('hints with the last 4 characters before the base64 padding only', () => {
    // A generated secret ends in '=': before, its hint was 3 characters and the padding.
    const s = generateSecret();
    expect(s).toMatch(/=$/);
    expect(secretHint(s)).toBe(s.slice(-5, -1));
    expect(secretHint(s)).toMatch(/^[A-Za-z0-9+/]{4}$/);
    expect(secretHint('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')).toBe('LaSw');
    expect(secretHint('whsec_' + 'A'.repeat(42) + '==')).toBe('AAAA');
    expect(secretHint('whsec_abc')).toBe('');
  });
});

describe('webhook signatures', () => {
  it('reproduces the Standard Webhooks published test vector', () => {
    const headers = signPayload({ msgId: VECTOR.msgId, timestamp: VECTOR.timestamp, body: VECTOR.body, secrets: [VECTOR.secret] });
    expect(headers).toEqual({
      'webhook-id': VECTOR.msgId,
      'webhook-timestamp': '1614265330',
      'webhook-signature': VECTOR.signature,
    });
    // The reference library agrees on the same input.
    expect(new Webhook(VECTOR.secret).sign(VECTOR.msgId, new Date(VECTOR.timestamp * 1000), VECTOR.body)).toBe(VECTOR.signature);
  });

  it('verifies with the official standardwebhooks package', () => {
    const secret = generateSecret();
    const body = JSON.stringify({ id: 'evt_1', type: 'order.created', data: { orderNo: 'Ω-42 ünïcode' } });
    const headers = signPayload({ msgId: 'dlv_1', timestamp: now(), body, secrets: [secret] });
    expect(new Webhook(secret).verify(body, { ...headers })).toEqual(JSON.parse(body));
    // A tampered body does not verify.
    expect(() => new Webhook(secret).verify(body.replace('42', '43'), { ...headers })).toThrow(/No matching signature/);
  });

  it('signs once per secret during rotation, and each secret verifies on its own', () => {
    const oldSecret = generateSecret();
    const newSecret = generateSecret();
    const body = '{"id":"evt_2"}';
    const headers = signPayload({ msgId: 'dlv_2', timestamp: now(), body, secrets: [newSecret, oldSecret] });
    const parts = headers['webhook-signature'].split(' ');
    expect(parts).toHaveLength(2);
    expect(parts.every((p) => p.startsWith('v1,'))).toBe(true);
    expect(new Webhook(oldSecret).verify(body, { ...headers })).toEqual({ id: 'evt_2' });
    expect(new Webhook(newSecret).verify(body, { ...headers })).toEqual({ id: 'evt_2' });
    expect(() => new Webhook(generateSecret()).verify(body, { ...headers })).toThrow();
    // Each signature on its own belongs to exactly one secret.
    expect(() => new Webhook(oldSecret).verify(body, { ...headers, 'webhook-signature': parts[0]! })).toThrow();
    expect(new Webhook(oldSecret).verify(body, { ...headers, 'webhook-signature': parts[1]! })).toEqual({ id: 'evt_2' });
  });

  it('refuses bad input with errors that name the field', () => {
    const secret = generateSecret();
    expect(() => signPayload({ msgId: 'a b', timestamp: 1, body: '', secrets: [secret] })).toThrow(/msgId/);
    expect(() => signPayload({ msgId: 'a', timestamp: 1.5, body: '', secrets: [secret] })).toThrow(/timestamp/);
    expect(() => signPayload({ msgId: 'a', timestamp: 1, body: '', secrets: [] })).toThrow(/secrets/);
    expect(() => signPayload({ msgId: 'a', timestamp: 1, body: '', secrets: ['nope'] })).toThrow(WebhookSecretError);
  });

  it('verifyPayload (rea receiver side) agrees with the spec and checks freshness', () => {
    const secret = generateSecret();
    const body = '{"x":1}';
    const ts = now();
    const headers = signPayload({ msgId: 'dlv_3', timestamp: ts, body, secrets: [secret] });
    expect(verifyPayload({ headers: { ...headers }, body, secrets: [secret] })).toBe(true);
    expect(verifyPayload({ headers: { ...headers }, body: '{"x":2}', secrets: [secret] })).toBe(false);
    expect(verifyPayload({ headers: { ...headers }, body, secrets: [generateSecret()] })).toBe(false);
    expect(verifyPayload({ headers: { ...headers }, body, secrets: [secret], now: ts + 301 })).toBe(false);
    expect(
      verifyPayload({
        headers: { 'webhook-id': VECTOR.msgId, 'webhook-timestamp': String(VECTOR.timestamp), 'webhook-signature': `v1,bogus ${VECTOR.signature}` },
        body: VECTOR.body,
        secrets: [VECTOR.secret],
        now: VECTOR.timestamp,
      }),
    ).toBe(true);
  });

  it('verifyPayload takes a secret with or without whsec_, as standardwebhooks does; one that is neither matches nothing', () => {
    // Before, the bare base64 (what some receivers keep in their settings) verified nothing.
    const secret = generateSecret();
    const bare = secret.slice('whsec_'.length);
    const body = '{"x":3}';
    const headers = signPayload({ msgId: 'dlv_5', timestamp: now(), body, secrets: [secret] });
    expect(() => new Webhook(bare).verify(body, headers)).not.toThrow();
    expect(verifyPayload({ headers: { ...headers }, body, secrets: [bare] })).toBe(true);
    expect(verifyPayload({ headers: { ...headers }, body, secrets: [secret] })).toBe(true);
    const vector = { 'webhook-id': VECTOR.msgId, 'webhook-timestamp': String(VECTOR.timestamp), 'webhook-signature': VECTOR.signature };
    expect(verifyPayload({ headers: vector, body: VECTOR.body, secrets: [VECTOR.secret.slice(6)], now: VECTOR.timestamp })).toBe(true);
    for (const neither of ['whsec_' + bare.slice(0, 20) + '!!', bare + '*', 'whsec_', '', 'c2hvcnQ=']) {
      expect(verifyPayload({ headers: { ...headers }, body, secrets: [neither] })).toBe(false);
    }
    // Creating or signing still wants the whsec_ form.
    expect(() => parseSecret(bare)).toThrow(WebhookSecretError);
  });

  it('verifyPayload never throws: a parsed body, missing headers or secrets are false; the raw bytes verify', () => {
    const secret = generateSecret();
    const body = '{"x":"é"}';
    const headers = signPayload({ msgId: 'dlv_4', timestamp: now(), body, secrets: [secret] });
    expect(verifyPayload({ headers: { ...headers }, body: Buffer.from(body, 'utf8'), secrets: [secret] })).toBe(true);
    // Before, each of these threw a TypeError (ERR_INVALID_ARG_TYPE from the HMAC, or from Object.entries).
    const bad: unknown[] = [
      { headers: { ...headers }, body: JSON.parse(body), secrets: [secret] },
      { headers: { ...headers }, body: undefined, secrets: [secret] },
      { headers: undefined, body, secrets: [secret] },
      { headers: { ...headers }, body, secrets: undefined },
      { headers: { ...headers }, body, secrets: secret },
      undefined,
    ];
    for (const input of bad) expect(verifyPayload(input as never)).toBe(false);
  });
});
