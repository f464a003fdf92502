/**
 * Every operation this server answers, in one list. An operation of the document that is not
 * listed here answers 501 Not Implemented until its handler lands.
 */
import type { HandlerMap } from './types';
import { getBalance } from './getBalance';
import { getConfig } from './getConfig';
import { getConsole } from './getConsole';
import { getCreditsBalance } from './getCreditsBalance';
import { getDiscoveryResources } from './getDiscoveryResources';
import { getDocs } from './getDocs';
import { getHealth } from './getHealth';
import { getHealthLive } from './getHealthLive';
import { getHealthReady } from './getHealthReady';
import { getLimits } from './getLimits';
import { getLlmHealth } from './getLlmHealth';
import { getMetrics } from './getMetrics';
import { getOpenApiDocument } from './getOpenApiDocument';
import { getPayments } from './getPayments';
import { getRateLimitMetrics } from './getRateLimitMetrics';
import { getRelayLimits } from './getRelayLimits';
import { getUsage } from './getUsage';
import { getWebhook } from './getWebhook';
import { postCreditsPurchase } from './postCreditsPurchase';
import { postMcp } from './postMcp';
import { postLlmChat } from './postLlmChat';
import { postLlmTranslate } from './postLlmTranslate';
import { postProxy } from './postProxy';
import { postProxySim } from './postProxySim';
import { postRelay } from './postRelay';
import { postRelaySim } from './postRelaySim';
import { postSim } from './postSim';

export const handlers: HandlerMap = {
  getBalance,
  getConfig,
  getConsole,
  getCreditsBalance,
  getDiscoveryResources,
  getDocs,
  getHealth,
  getHealthLive,
  getHealthReady,
  getLimits,
  getLlmHealth,
  getMetrics,
  getOpenApiDocument,
  getPayments,
  getRateLimitMetrics,
  getRelayLimits,
  getUsage,
  getWebhook,
  postCreditsPurchase,
  postLlmChat,
  postLlmTranslate,
  postMcp,
  postProxy,
  postProxySim,
  postRelay,
  postRelaySim,
  postSim,
};
