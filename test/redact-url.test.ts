// Where rea prints a webhook URL for a person (the panel, its notices, the CLI's text output), the
// URL's userinfo and the values of query parameters named like secrets are shown as ***.
import { describe, expect, it } from 'vitest';
import { formatEndpoint } from '../src/cli/endpoints.js';
import { isSecretParam, redactUrl } from '../src/core/redact-url.js';

describe('redactUrl', () => {
  it('hides secret-looking query values and userinfo, keeps everything else byte for byte', () => {
    expect(redactUrl('https://h.example/in?token=abc&page=2')).toBe('https://h.example/in?token=***&page=2');
    expect(redactUrl('https://h.example/a?apiKey=1&access_token=2&X-Amz-Signature=3&sig=&q=a%20b')).toBe('https://h.example/a?apiKey=***&access_token=***&X-Amz-Signature=***&sig=&q=a%20b');
    expect(redactUrl('https://user:pass@h.example/p')).toBe('https://***@h.example/p');
    expect(redactUrl('https://h.example/p?page=1')).toBe('https://h.example/p?page=1');
    expect(redactUrl('not a url')).toBe('not a url');
  });

  it('judges parameter names by their words', () => {
    for (const n of ['token', 'api_key', 'apikey', 'x-api-key', 'clientSecret', 'password', 'auth', 'signature', 'code']) expect(isSecretParam(n), n).toBe(true);
    for (const n of ['page', 'tenant', 'format', 'monkey', 'tokenizer_version']) expect(isSecretParam(n), n).toBe(false);
  });
});

describe('rea endpoints list (text)', () => {
  it('prints the URL redacted', () => {
    const now = new Date();
    const text = formatEndpoint({
      id: '0190a0a0-0000-7000-8000-000000000001', url: 'https://h.example/in?token=TOPSECRET42', description: null, eventTypes: ['order.*'],
      state: 'enabled', failingSince: null, disabledAt: null, disabledReason: null, secretHint: 'abcd', createdAt: now, updatedAt: now,
    } as never);
    expect(text).not.toContain('TOPSECRET42');
    expect(text).toContain('https://h.example/in?token=***');
  });
});
