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

  app.post('/verify', async (request, response) => {
    const body = readBody(request.body);
    if (!body) {
      response.status(400).json({ isValid: false, invalidReason: 'invalid_payload' });
      return;
    }
    const { payment, requirements } = body;
    let answer: VerifyResponse;
    try {
      if (isEvmNetwork(requirements.network)) answer = await evm.verify(payment, requirements);
      else if (isSolanaNetwork(requirements.network)) answer = await svm.verify(payment, requirements);
      else answer = { isValid: false, invalidReason: 'invalid_network' };
    } catch (error) {
      answer = { isValid: false, invalidReason: 'unexpected_verify_error' };
      console.error('facilitator /verify:', error);
    }
    calls.push({ path: '/verify', network: requirements.network, payment, requirements, answer });
    response.json(answer);
  });

  app.post('/settle', async (request, response) => {
    const body = readBody(request.body);
    if (!body) {
      response.status(400).json({ success: false, errorReason: 'invalid_payload', transaction: '', network: '' });
      return;
    }
    const { payment, requirements } = body;
    let answer: SettleResponse;
    try {
      if (isEvmNetwork(requirements.network)) answer = await evm.settle(payment, requirements);
      else if (isSolanaNetwork(requirements.network)) answer = await svm.settle(payment, requirements);
      else answer = { success: false, errorReason: 'invalid_network', transaction: '', network: requirements.network };
    } catch (error) {
      answer = {
        success: false,
        errorReason: 'unexpected_settle_error',
        transaction: '',
        network: requirements.network,
      };
      console.error('facilitator /settle:', error);
    }
    calls.push({ path: '/settle', network: requirements.network, payment, requirements, answer });
    response.json(answer);
  });

  const server = await listenLocally(app);
  return { ...server, solanaFeePayer: svm.feePayer, calls };
}
