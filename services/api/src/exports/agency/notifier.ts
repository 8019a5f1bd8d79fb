import type { ExportsSettings } from '../config.js';
import { RetryableExportError, isRetryableStatus, retryAfterMs } from '../errors.js';
import { MailRejectedError, type DeliveryOutcome, type Mailer } from '../../notifications/mailer.js';
import type { AgencyChangeset } from './changeset.js';
import { DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signAgencyPayload } from './signature.js';

export interface AgencyNotifierDeps {
  settings: Pick<ExportsSettings, 'agency' | 'userAgent' | 'httpTimeoutMs'>;
  /** null when SMTP_URL is not set. */
  mailer: Mailer | null;
  clock?: () => Date;
  fetch?: typeof fetch;
}

/**
 * Delivers the approval changeset to the agency: POSTed as signed JSON to AGENCY_WEBHOOK_URL if
 * set, otherwise e-mailed to AGENCY_EMAIL (text summary plus the JSON attached), otherwise skipped.
 * Delivery is at least once: a retry after a crash may deliver again with the same X-Agency-Delivery.
 */
export class AgencyNotifier {
  private readonly fetchImpl: typeof fetch;
  private readonly clock: () => Date;

  constructor(private readonly deps: AgencyNotifierDeps) {
    this.fetchImpl = deps.fetch ?? fetch;
    this.clock = deps.clock ?? (() => new Date());
  }

  async notify(changeset: AgencyChangeset): Promise<DeliveryOutcome> {
    const { webhookUrl, webhookSecret, email } = this.deps.settings.agency;
    if (webhookUrl && webhookSecret) return this.post(webhookUrl, webhookSecret, changeset);
    if (email && email.length > 0) {
      if (!this.deps.mailer) return { status: 'skipped', reason: 'AGENCY_EMAIL is set but SMTP_URL is not' };
      return this.mail(this.deps.mailer, email, changeset);
    }
    return { status: 'skipped', reason: 'neither AGENCY_WEBHOOK_URL nor AGENCY_EMAIL is set' };
  }

  private async post(url: string, secret: string, changeset: AgencyChangeset): Promise<DeliveryOutcome> {
    const body = JSON.stringify(changeset);
    const timestamp = Math.floor(this.clock().getTime() / 1000);
    let response: Response;
    try {
      response = await this.fetchImpl(url, {
        method: 'POST',
        redirect: 'manual', // a redirect could carry the signed payload somewhere unintended
        headers: {
          'content-type': 'application/json',
          'user-agent': this.deps.settings.userAgent,
          [TIMESTAMP_HEADER]: String(timestamp),
          [SIGNATURE_HEADER]: signAgencyPayload(secret, timestamp, body),
          [DELIVERY_HEADER]: changeset.deliveryId,
        },
        body,
        signal: AbortSignal.timeout(this.deps.settings.httpTimeoutMs),
      });
      await response.arrayBuffer();
    } catch (cause) {
      throw new RetryableExportError(`agency webhook: ${(cause as Error).message}`, { cause });
    }
    if (response.ok) return { status: 'sent', channel: 'webhook', recipients: [new URL(url).origin], id: changeset.deliveryId };
    if (isRetryableStatus(response.status)) {
      const delay = retryAfterMs(response.headers.get('retry-after'));
      throw new RetryableExportError(`agency webhook answered ${response.status}`, delay === undefined ? {} : { retryAfterMs: delay });
    }
    return { status: 'failed', reason: `agency webhook answered ${response.status}` };
  }

  private async mail(mailer: Mailer, to: string[], changeset: AgencyChangeset): Promise<DeliveryOutcome> {
    const { feature } = changeset;
    const lines = [
      `${feature.name} (${feature.kategorie}) was approved as version ${feature.version} by ${changeset.reviewer.name ?? changeset.reviewer.id} at ${changeset.approvedAt}.`,
      changeset.previousVersion === null ? 'This is its first approval.' : `Changes since the approved version ${changeset.previousVersion}:`,
      ...changeset.changes.map((c) => `- ${c.field}: ${c.before ?? '(empty)'} → ${c.after ?? '(empty)'}`),
      `Geometry changed: ${changeset.geometryChanged ? 'yes' : 'no'}`,
      '',
      'The full changeset is attached as JSON.',
    ];
    try {
      const id = await mailer.send({
        to,
        subject: `Feature approved: "${feature.name}" (version ${feature.version})`,
        text: lines.join('\n'),
        messageId: `<agency.${changeset.deliveryId.replace(/[^\w.-]/g, '.')}@feature-platform>`,
        attachments: [{ filename: `changeset-${feature.id}-v${feature.version}.json`, content: JSON.stringify(changeset, null, 2), contentType: 'application/json' }],
      });
      return { status: 'sent', channel: 'email', recipients: to, id };
    } catch (error) {
      if (error instanceof MailRejectedError) return { status: 'failed', reason: error.message };
      throw error;
    }
  }
}
