import { createHmac } from 'node:crypto';
import { safeEqual } from '../../../../shared/safe-compare.js';

/**
 * Webhook signature, Stripe-style so a replayed old request can be refused:
 *
 *   X-Agency-Timestamp: <unix seconds>
 *   X-Agency-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>
 *   X-Agency-Delivery:  <deliveryId>   (same on every retry of one approval)
 *
 * A receiver recomputes the HMAC over the exact bytes it received (before any JSON parsing),
 * compares in constant time and rejects timestamps further than 5 minutes from its clock.
 */
export const TIMESTAMP_HEADER = 'x-agency-timestamp';
export const SIGNATURE_HEADER = 'x-agency-signature';
export const DELIVERY_HEADER = 'x-agency-delivery';
export const DEFAULT_TOLERANCE_SECONDS = 300;

export function signAgencyPayload(secret: string, timestamp: number, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`, 'utf8').digest('hex')}`;
}

export function verifyAgencySignature(input: {
  secret: string;
  body: string;
  timestamp: string | undefined;
  signature: string | undefined;
  now?: Date;
  toleranceSeconds?: number;
}): boolean {
  if (!input.timestamp || !/^\d{1,12}$/.test(input.timestamp) || !input.signature) return false;
  const nowSeconds = Math.floor((input.now ?? new Date()).getTime() / 1000);
  if (Math.abs(nowSeconds - Number(input.timestamp)) > (input.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS)) return false;
  return safeEqual(signAgencyPayload(input.secret, Number(input.timestamp), input.body), input.signature);
}
