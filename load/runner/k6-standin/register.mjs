// Maps the k6 module names to the stand-in (node --import ./register.mjs run.mjs ...).
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
