// The facilitator's HTTP API (x402 v1): POST /verify, POST /settle, GET /supported. Invalid
// payments are answers (200 with isValid or success false), as x402-express expects; a body that is
// not a facilitator request is a 400. Every call is recorded for tests.
import express from 'express';
import { listenLocally, type RunningServer } from '../http.js';
import { isEvmNetwork, isSolanaNetwork } from '../networks.js';
import {
  X402_VERSION,
  type PaymentPayload,
  type PaymentRequirements,
  type SettleResponse,
  type VerifyResponse,
} from '../x402.js';
import type { EvmFacilitator } from './evm.js';
import { serveVerifyAndSettle } from './routes.js';
import type { SvmFacilitator } from './svm.js';

export interface FacilitatorCall {
  path: '/verify' | '/settle';
  network: string;
  payment: PaymentPayload;
  requirements: PaymentRequirements;
  answer: VerifyResponse | SettleResponse;
}

export interface Facilitator extends RunningServer {
  /** Fee payer of Solana payments, given to clients as extra.feePayer. */
  solanaFeePayer: string;
  calls: FacilitatorCall[];
}

export interface FacilitatorOptions {
  evm: EvmFacilitator;
  svm: SvmFacilitator;
  evmNetworks: string[];
  solanaNetworks: string[];
}

export async function startFacilitator({
  evm,
  svm,
  evmNetworks,
  solanaNetworks,
}: FacilitatorOptions): Promise<Facilitator> {
  const calls: FacilitatorCall[] = [];
  const app = express();
  app.use(express.json({ limit: '1mb' }));

  const kinds = [
    ...evmNetworks.map((network) => ({ x402Version: X402_VERSION, scheme: 'exact', network })),
    ...solanaNetworks.map((network) => ({
      x402Version: X402_VERSION,
      scheme: 'exact',
      network,
      extra: { feePayer: svm.feePayer },
    })),
  ];
  app.get('/supported', (_request, response) => {
    response.json({ kinds });
  });

  function readBody(body: unknown): { payment: PaymentPayload; requirements: PaymentRequirements } | undefined {
    const { paymentPayload, paymentRequirements } = (body ?? {}) as {
      paymentPayload?: unknown;
      paymentRequirements?: unknown;
    };
    if (typeof paymentPayload !== 'object' || paymentPayload === null) return undefined;
    if (typeof paymentRequirements !== 'object' || paymentRequirements === null) return undefined;
    const requirements = paymentRequirements as PaymentRequirements;
    if (typeof requirements.network !== 'string' || typeof requirements.maxAmountRequired !== 'string')
      return undefined;
    if (!/^\d+$/.test(requirements.maxAmountRequired)) return undefined;
    return { payment: paymentPayload as PaymentPayload, requirements };
  }

  serveVerifyAndSettle(app, {
    readBody,
    verify: (payment, requirements) => {
      if (isEvmNetwork(requirements.network)) return evm.verify(payment, requirements);
      if (isSolanaNetwork(requirements.network)) return svm.verify(payment, requirements);
      return Promise.resolve({ isValid: false, invalidReason: 'invalid_network' });
    },
    verifyFailed: (error) => {
      console.error('facilitator /verify:', error);
      return { isValid: false, invalidReason: 'unexpected_verify_error' };
    },
    settle: (payment, requirements) => {
      if (isEvmNetwork(requirements.network)) return evm.settle(payment, requirements);
      if (isSolanaNetwork(requirements.network)) return svm.settle(payment, requirements);
      return Promise.resolve({
        success: false,
        errorReason: 'invalid_network',
        transaction: '',
        network: requirements.network,
      });
    },
    settleFailed: (error, requirements) => {
      console.error('facilitator /settle:', error);
      return { success: false, errorReason: 'unexpected_settle_error', transaction: '', network: requirements.network };
    },
    record: (path, payment, requirements, answer) =>
      calls.push({ path, network: requirements.network, payment, requirements, answer }),
  });

  const server = await listenLocally(app);
  return { ...server, solanaFeePayer: svm.feePayer, calls };
}
