/** An environment in which the shipped identity configuration is valid (test values, not secrets). */
export const VALID_ENV: Record<string, string> = {
  IDENTITY_PARENT_DOMAIN: 'example.org',
  IDENTITY_AUTH_URL: 'https://auth.example.org',
  IDENTITY_APP_URL: 'https://app.example.org',
  KRATOS_PUBLIC_URL: 'https://auth.example.org/kratos',
  KRATOS_ADMIN_URL: 'http://kratos:4434',
  HYDRA_PUBLIC_URL: 'https://oauth.example.org/',
  HYDRA_ADMIN_URL: 'http://hydra:4445',
  IDENTITY_SMTP_FROM: 'noreply@example.org',
  KRATOS_DSN: 'postgres://kratos:k-pass@db:5432/kratos?sslmode=disable',
  KRATOS_SECRETS_DEFAULT: 'default-secret-0123456789abcdef',
  KRATOS_SECRETS_COOKIE: 'cookie-secret-0123456789abcdef',
  KRATOS_SECRETS_CIPHER: '0123456789abcdef0123456789abcdef',
  KRATOS_SMTP_URI: 'smtps://mailer:m-pass@mail.example.org:465/',
  HYDRA_DSN: 'postgres://hydra:h-pass@db:5432/hydra?sslmode=disable',
  HYDRA_SECRETS_SYSTEM: 'system-secret-0123456789abcdef-0123456789',
};

