// A preload (`node --import <this file>`) that makes the secp256k1 package's native binding
// unloadable, as on a platform it ships no prebuild for: the service must choose the WebAssembly
// build instead. The binding is loaded with require (createRequire), so its resolution is patched.
import Module from 'node:module';

const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'secp256k1/bindings') {
    const error = new Error(`Cannot find module '${request}'`);
    error.code = 'MODULE_NOT_FOUND';
    throw error;
  }
  return resolveFilename.call(this, request, ...rest);
};
