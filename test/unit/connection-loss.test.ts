import { describe, expect, it } from 'vitest';
import { isConnectionLoss } from '../../db/index';

describe('isConnectionLoss', () => {
  it('knows a server restart, an admin kill and a dropped socket', () => {
    expect(
      isConnectionLoss(
        Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      ),
    ).toBe(true);
    expect(isConnectionLoss(Object.assign(new Error('the database system is shutting down'), { code: '57P03' }))).toBe(
      true,
    );
    expect(isConnectionLoss(Object.assign(new Error('connection failure'), { code: '08006' }))).toBe(true);
    expect(isConnectionLoss(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))).toBe(true);
    expect(isConnectionLoss(new Error('Connection terminated unexpectedly'))).toBe(true);
  });

  it('does not take a failing statement or a bug for a lost connection', () => {
    expect(isConnectionLoss(Object.assign(new Error('duplicate key value'), { code: '23505' }))).toBe(false);
    expect(isConnectionLoss(Object.assign(new Error('deadlock detected'), { code: '40P01' }))).toBe(false);
    expect(isConnectionLoss(new TypeError("Cannot read properties of undefined (reading 'id')"))).toBe(false);
    expect(isConnectionLoss(undefined)).toBe(false);
    expect(isConnectionLoss('Connection terminated')).toBe(false);
  });
});
