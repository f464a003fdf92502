import { pino, type Logger } from 'pino';

export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'payment-routing-service' },
    redact: {
      paths: [
        'req.headers["x-api-key"]',
        'req.headers["x-payment"]',
        'req.headers.authorization',
        '*.privateKey',
        '*.apiKey',
      ],
      censor: '[redacted]',
    },
  });
}
