// Typed errors of the webhook primitives. Their messages name the problem and never carry a
// secret, a signature or a request header, because they end up in logs and the attempt log.
import { ReaError, type ReaErrorCode } from '../../core/errors.js';

export type WebhookErrorCode = Extract<ReaErrorCode, 'ERR_WEBHOOK_SECRET' | 'ERR_WEBHOOK_URL_REFUSED'>;

function code(c: WebhookErrorCode): ReaErrorCode {
  return c;
}

/** A webhook secret is malformed. The message says what is wrong, never what the secret is. */
export class WebhookSecretError extends ReaError {
  constructor(problem: string) {
    super(code('ERR_WEBHOOK_SECRET'), `invalid webhook secret: ${problem}`);
  }
}

/** Why a URL was refused: a bad shape, or a host whose address the SSRF guard will not reach. */
export type WebhookUrlRefusal = 'invalid' | 'scheme' | 'credentials' | 'address';

/** A webhook URL the SSRF guard refuses; `reason` is the human part ("resolves to loopback address 127.0.0.1"). */
export class WebhookUrlRefusedError extends ReaError {
  constructor(
    readonly refusal: WebhookUrlRefusal,
    readonly reason: string,
    readonly host?: string,
    readonly address?: string,
    readonly addressKind?: string,
  ) {
    super(code('ERR_WEBHOOK_URL_REFUSED'), `webhook URL refused${host ? ` (host ${host})` : ''}: ${reason}`);
  }
}
