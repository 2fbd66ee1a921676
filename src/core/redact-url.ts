// A URL as rea prints it: in the panel, its notices and the CLI's text output. A webhook URL is
// the receiver's to choose, and receivers often authenticate by it (`?token=…`, `?sig=…`); the
// endpoint keeps the whole URL, but wherever a person (or a proxy's access log, or a terminal's
// scrollback) reads it, userinfo and the values of query parameters whose names say "secret"
// are replaced by `***`. Text that is not an absolute URL is returned as it is.

// A parameter name counts as secret when one of its words (split on _ - . and case changes) is
// one of these, or when the whole name is.
const SECRET_WORDS = new Set([
  'token', 'secret', 'key', 'apikey', 'password', 'passwd', 'pass', 'pwd', 'auth', 'authorization',
  'sig', 'signature', 'credential', 'credentials', 'session', 'sid', 'jwt', 'bearer', 'code', 'hmac',
  'ticket', 'otp', 'access', 'private',
]);

export const REDACTED = '***';

export function isSecretParam(name: string): boolean {
  const words = name.replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
  const whole = words.join('');
  return SECRET_WORDS.has(whole) || words.some((w) => SECRET_WORDS.has(w));
}

export function redactUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return text;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return text;
  let changed = false;
  if (url.username !== '' || url.password !== '') {
    url.username = REDACTED;
    url.password = '';
    changed = true;
  }
  if (url.search !== '') {
    // Rebuilt by hand: URLSearchParams would re-encode the parameters that stay as they were.
    const parts = url.search.slice(1).split('&').map((part) => {
      const eq = part.indexOf('=');
      if (eq < 0) return part;
      let name: string;
      try {
        name = decodeURIComponent(part.slice(0, eq).replace(/\+/g, ' '));
      } catch {
        name = part.slice(0, eq);
      }
      if (!isSecretParam(name) || part.length === eq + 1) return part;
      changed = true;
      return `${part.slice(0, eq)}=${REDACTED}`;
    });
    url.search = parts.join('&');
  }
  return changed ? url.toString() : text;
}
