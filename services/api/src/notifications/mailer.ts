import nodemailer from 'nodemailer';
import type { MailSettings } from '../exports/config.js';
import { RetryableExportError } from '../exports/errors.js';

/**
 * Sending mail over SMTP (nodemailer, `SMTP_URL`). One connection per message: notices are rare,
 * and a pooled connection would outlive an SMTP server restart.
 */
export interface MailMessage {
  to: string[];
  subject: string;
  text: string;
  /** A stable Message-ID lets receivers drop the duplicate when a job re-sends after a crash. */
  messageId?: string;
  attachments?: { filename: string; content: string; contentType: string }[];
}

export interface Mailer {
  /** Resolves with the Message-ID; throws RetryableExportError (server down, 4xx) or MailRejectedError (5xx). */
  send(message: MailMessage): Promise<string>;
}

/** The SMTP server refused permanently (5xx): retrying the same message cannot help. */
export class MailRejectedError extends Error {
  override readonly name = 'MailRejectedError';
}

/** The outcome of one notice delivery, recorded per job. */
export type DeliveryOutcome =
  | { status: 'sent'; channel: 'email' | 'webhook'; recipients: string[]; id: string }
  | { status: 'skipped'; reason: string }
  | { status: 'failed'; reason: string };

/** A mailer for `SMTP_URL`, or null when it is not configured (callers record `skipped`). */
export function createSmtpMailer(settings: MailSettings, timeoutMs = 15_000): Mailer | null {
  if (!settings.smtpUrl) return null;
  const transport = nodemailer.createTransport({
    url: settings.smtpUrl,
    connectionTimeout: timeoutMs,
    greetingTimeout: timeoutMs,
    socketTimeout: timeoutMs,
  } as Parameters<typeof nodemailer.createTransport>[0]);
  return {
    async send(message) {
      try {
        const info = (await transport.sendMail({
          from: settings.from,
          to: message.to,
          subject: message.subject.replace(/[\r\n]+/g, ' '),
          text: message.text,
          ...(message.messageId ? { messageId: message.messageId } : {}),
          ...(message.attachments ? { attachments: message.attachments } : {}),
        })) as { messageId: string };
        return info.messageId;
      } catch (error) {
        const code = (error as { responseCode?: number }).responseCode;
        if (typeof code === 'number' && code >= 500) throw new MailRejectedError(`SMTP server refused the message: ${(error as Error).message}`, { cause: error });
        throw new RetryableExportError(`SMTP delivery failed: ${(error as Error).message}`, { cause: error });
      }
    },
  };
}
