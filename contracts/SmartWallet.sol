// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title SmartWallet
/// @notice A minimal ERC-1271 contract wallet for local chains: one owner key, whose EIP-712
/// signatures the wallet vouches for, so the wallet can pay with EIP-3009 authorizations of USDC
/// (FiatToken v2.2 asks a signer with code through ERC-1271). The owner can move what it holds.
/// @dev Two signature encodings are accepted, both signed by the owner over the digest itself:
/// the 65 bytes r || s || v of an ECDSA signature, and abi.encode(address owner, bytes ecdsa), the
/// longer shape multi-owner wallets use (it is what makes a payer send more than 65 bytes).
contract SmartWallet {
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;
    bytes4 private constant ERC1271_INVALID = 0xffffffff;
    uint256 private constant HALF_CURVE_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    address public immutable owner;

    constructor(address walletOwner) {
        require(walletOwner != address(0), "SmartWallet: owner is the zero address");
        owner = walletOwner;
    }

    function isValidSignature(bytes32 digest, bytes memory signature) external view returns (bytes4) {
        bytes memory ecdsa = signature;
        if (signature.length != 65) {
            (address claimed, bytes memory inner) = abi.decode(signature, (address, bytes));
            if (claimed != owner) return ERC1271_INVALID;
            ecdsa = inner;
        }
        return _recover(digest, ecdsa) == owner ? ERC1271_MAGIC_VALUE : ERC1271_INVALID;
    }

    /// The owner's way to use what the wallet holds (e.g. transfer its USDC).
    function execute(address to, uint256 value, bytes calldata data) external returns (bytes memory) {
        require(msg.sender == owner, "SmartWallet: caller is not the owner");
        (bool success, bytes memory result) = to.call{value: value}(data);
        if (!success) {
            assembly {
                revert(add(result, 0x20), mload(result))
            }
        }
        return result;
    }

    receive() external payable {}

    function _recover(bytes32 digest, bytes memory signature) private pure returns (address) {
        if (signature.length != 65) return address(0);
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        if (uint256(s) > HALF_CURVE_ORDER || (v != 27 && v != 28)) return address(0);
        return ecrecover(digest, v, r, s);
    }
}

/// @title SmartWalletFactory
/// @notice Deploys SmartWallets with CREATE2, so a wallet's address is known before it exists: the
/// factory call an ERC-6492 signature carries for a counterfactual wallet.
contract SmartWalletFactory {
    event WalletDeployed(address indexed wallet, address indexed owner, bytes32 salt);

    /// Deploys the wallet of (owner, salt), or returns it when it already exists.
    function deploy(address walletOwner, bytes32 salt) external returns (address wallet) {
        wallet = walletAddress(walletOwner, salt);
        if (wallet.code.length > 0) return wallet;
        SmartWallet created = new SmartWallet{salt: salt}(walletOwner);
        require(address(created) == wallet, "SmartWalletFactory: unexpected address");
        emit WalletDeployed(wallet, walletOwner, salt);
    }

    function walletAddress(address walletOwner, bytes32 salt) public view returns (address) {
        bytes32 initCodeHash = keccak256(abi.encodePacked(type(SmartWallet).creationCode, abi.encode(walletOwner)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, initCodeHash)))));
    }
}
