/**
 * Just enough MIME to read back what nodemailer sends in tests: unfolded headers with RFC 2047
 * encoded words decoded, and the text/plain body (quoted-printable, base64 or 7bit, possibly inside
 * multipart/mixed or multipart/alternative) plus attachments by file name. No mail library is
 * installed for this; the format nodemailer produces is regular enough.
 */
export interface ParsedMail {
  headers: Record<string, string>;
  subject: string;
  text: string;
  attachments: { filename: string; contentType: string; content: string }[];
}

function decodeWords(value: string): string {
  return value.replace(/=\?([^?]+)\?([QqBb])\?([^?]*)\?=\s*(?==\?)?/g, (_m, _charset: string, encoding: string, data: string) => {
    if (encoding.toUpperCase() === 'B') return Buffer.from(data, 'base64').toString('utf8');
    const bytes = data.replace(/_/g, ' ').replace(/=([0-9A-Fa-f]{2})/g, (_x, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    return Buffer.from(bytes, 'latin1').toString('utf8');
  });
}

function splitHeadersAndBody(raw: string): { headers: Record<string, string>; body: string } {
  const normalized = raw.replace(/\r\n/g, '\n');
  const end = normalized.indexOf('\n\n');
  const head = end < 0 ? normalized : normalized.slice(0, end);
  const body = end < 0 ? '' : normalized.slice(end + 2);
  const headers: Record<string, string> = {};
  for (const line of head.replace(/\n[ \t]+/g, ' ').split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = decodeWords(line.slice(colon + 1).trim());
  }
  return { headers, body };
}

function decodeBody(body: string, transferEncoding: string | undefined): string {
  switch ((transferEncoding ?? '7bit').toLowerCase()) {
    case 'base64':
      return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
    case 'quoted-printable': {
      const bytes = body.replace(/=\n/g, '').replace(/=([0-9A-Fa-f]{2})/g, (_x, hex: string) => String.fromCharCode(parseInt(hex, 16)));
      return Buffer.from(bytes, 'latin1').toString('utf8');
    }
    default:
      return body;
  }
}

function walk(raw: string, out: ParsedMail): void {
  const { headers, body } = splitHeadersAndBody(raw);
  const contentType = headers['content-type'] ?? 'text/plain';
  const boundary = /boundary="?([^";]+)"?/i.exec(contentType)?.[1];
  if (contentType.toLowerCase().startsWith('multipart/') && boundary) {
    const parts = body.split(`--${boundary}`).slice(1);
    for (const part of parts) {
      if (part.startsWith('--')) break;
      walk(part.replace(/^\n/, ''), out);
    }
    return;
  }
  const decoded = decodeBody(body, headers['content-transfer-encoding']);
  const filename = /filename="?([^";]+)"?/i.exec(headers['content-disposition'] ?? '')?.[1];
  if (filename) out.attachments.push({ filename: decodeWords(filename), contentType: contentType.split(';')[0]!, content: decoded });
  else if (contentType.toLowerCase().startsWith('text/plain') && out.text === '') out.text = decoded.replace(/\n$/, '');
}

export function parseMail(raw: string): ParsedMail {
  const { headers } = splitHeadersAndBody(raw);
  const mail: ParsedMail = { headers, subject: headers.subject ?? '', text: '', attachments: [] };
  walk(raw, mail);
  return mail;
}
