// Hardhat 2 settings of the local EVM chains that devnet/evm/chain.ts starts in-process
// (one chain per network, each with that network's real chain id, set there).
// No hardhat task is run in this project: `hardhat compile` would download a compiler, so
// contracts are compiled with solc-js by devnet/evm/usdc-artifact.ts instead.
module.exports = {
  networks: {
    hardhat: {
      // No interval mining: devnet/evm/chain.ts mines an empty block only when an idle chain's
      // clock falls behind the wall clock.
      mining: { auto: true, interval: 0 },
      // Payment authorizations are timed by the wall clock. Hardhat gives every block a later
      // timestamp than the one before unless this is set, so a burst of settlements would push
      // the chain's clock ahead of the wall clock and expire authorizations early.
      allowBlocksWithSameTimestamp: true,
      loggingEnabled: false,
    },
  },
};
