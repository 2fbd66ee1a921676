// What bus.endpoints.create and update take, shared by the bus and the admin API: the keys each
// knows (any other is refused, not dropped) and the refusal of an update that changes nothing.
export const ENDPOINT_CHANGE_KEYS = { url: true, eventTypes: true, description: true } as const;
export const ENDPOINT_INPUT_KEYS = { ...ENDPOINT_CHANGE_KEYS, secret: true } as const;
export type EndpointChangeKey = keyof typeof ENDPOINT_CHANGE_KEYS;

export const NO_ENDPOINT_CHANGE = `give at least one of ${Object.keys(ENDPOINT_CHANGE_KEYS).join(', ')}`;

/** Whether an update gives anything to change (a key given as undefined changes nothing). */
export function changesSomething(changes: Partial<Record<EndpointChangeKey, unknown>>): boolean {
  return (Object.keys(ENDPOINT_CHANGE_KEYS) as EndpointChangeKey[]).some((key) => changes[key] !== undefined);
}
