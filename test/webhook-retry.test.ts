import { describe, it, expect } from 'vitest';
import { attemptInAllowance } from '../src/core/backoff.js';
import { parseRetryAfter, webhookRetryDelayMs, WEBHOOK_MAX_ATTEMPTS, WEBHOOK_MAX_RETRY_AFTER_MS } from '../src/channels/webhook/retry.js';

describe('webhook retry schedule', () => {
  it('counts attempts from the start of the current allowance: a retried delivery starts its schedule again', () => {
    expect([1, 5, 17].map((attempt) => attemptInAllowance({ attempt, maxAttempts: 18 }, 18))).toEqual([1, 5, 17]);
    // Retried at 18 of 18 (now 36), then at 36 of 36 (now 54); retried part way, at 3 (now 21).
    expect([19, 35].map((attempt) => attemptInAllowance({ attempt, maxAttempts: 36 }, 18))).toEqual([1, 17]);
    expect(attemptInAllowance({ attempt: 40, maxAttempts: 54 }, 18)).toBe(4);
    expect(attemptInAllowance({ attempt: 4, maxAttempts: 21 }, 18)).toBe(1);
    // Made under a larger webhooks.maxAttempts (25): never past its own count, never below 1.
    expect([1, 7, 8, 25].map((attempt) => attemptInAllowance({ attempt, maxAttempts: 25 }, 18))).toEqual([1, 7, 1, 18]);
    // Under a smaller one (10): counted as made.
    expect(attemptInAllowance({ attempt: 9, maxAttempts: 10 }, 18)).toBe(9);
  });

  it('waits attempt⁴ seconds with no jitter at the midpoint', () => {
    const mid = { random: () => 0.5 };
    expect([1, 2, 3, 10, 17].map((n) => webhookRetryDelayMs(n, mid))).toEqual([1_000, 16_000, 81_000, 10_000_000, 83_521_000]);
  });

  it('jitters by at most ±10 %', () => {
    expect(webhookRetryDelayMs(10, { random: () => 0 })).toBe(9_000_000);
    expect(webhookRetryDelayMs(10, { random: () => 0.999999 })).toBeLessThanOrEqual(11_000_000);
    expect(webhookRetryDelayMs(10, { random: () => 0.999999 })).toBeGreaterThan(10_999_000);
  });

  it('stops after 18 attempts, spread over about 3–4 days', () => {
    expect(WEBHOOK_MAX_ATTEMPTS).toBe(18);
    expect(webhookRetryDelayMs(17)).not.toBeNull();
    expect(webhookRetryDelayMs(18)).toBeNull();
    expect(webhookRetryDelayMs(3, { maxAttempts: 3 })).toBeNull();
    let total = 0;
    for (let n = 1; n < WEBHOOK_MAX_ATTEMPTS; n++) total += webhookRetryDelayMs(n, { random: () => 0.5 })!;
    const days = total / 86_400_000;
    expect(days).toBeGreaterThan(3);
    expect(days).toBeLessThan(4);
  });

  it('refuses nonsense with errors that name the field', () => {
    expect(() => webhookRetryDelayMs(0)).toThrow(/attempt/);
    expect(() => webhookRetryDelayMs(1, { jitterRatio: 1 })).toThrow(/jitterRatio/);
    expect(() => webhookRetryDelayMs(1, { maxAttempts: 0 })).toThrow(/maxAttempts/);
  });
});

describe('Retry-After', () => {
  const now = Date.UTC(2025, 5, 1, 8, 0, 0);
  it('reads seconds and HTTP dates, clamped to [0, 24 h]', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 30 ', now)).toBe(30_000);
    expect(parseRetryAfter(new Date(now + 45_000).toUTCString(), now)).toBe(45_000);
    expect(parseRetryAfter(new Date(now - 45_000).toUTCString(), now)).toBe(0);
    expect(parseRetryAfter('999999999', now)).toBe(WEBHOOK_MAX_RETRY_AFTER_MS);
    expect(parseRetryAfter('600', now, 60_000)).toBe(60_000);
    expect(parseRetryAfter(['5', '9'], now)).toBe(5_000);
  });
  it('ignores what it cannot read', () => {
    for (const v of [undefined, '', '-5', '1.5', 'soon', '2025-13-45']) expect(parseRetryAfter(v, now), String(v)).toBeUndefined();
  });
});
