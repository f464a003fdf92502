// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// The ERC-20 calls Permit2 and the proxies make.
interface IERC20Minimal {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// EIP-2612, which a proxy's settleWithPermit calls before the transfer.
interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// ERC-1271, asked when the owner of a permit is a contract.
interface IERC1271 {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

/// @title Permit2 (SignatureTransfer)
/// @notice The signature-transfer half of Uniswap's Permit2, written from its public interface
/// (ISignatureTransfer) and signature rules for local chains, where it is planted at the canonical
/// address 0x000000000022D473030F116dDEE9F6B43aC78BA3. An owner approves this contract once on a
/// token; afterwards a spender moves the owner's tokens with a permit the owner signed (EIP-712,
/// domain {name: "Permit2", chainId, verifyingContract}, no version), each nonce usable once
/// (unordered nonces: a bitmap of 256 per word). The witness variant binds extra data the spender
/// names through its type string, hashed as Permit2 does: the type is
/// "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline," + witnessTypeString.
/// @dev No constructor and no immutables: the runtime code is the same wherever it is planted. The
/// domain separator is computed on every call. Not carried over: AllowanceTransfer, batch transfers.
contract Permit2 {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    bytes32 public constant TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");
    bytes32 public constant PERMIT_TRANSFER_FROM_TYPEHASH = keccak256(
        "PermitTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline)TokenPermissions(address token,uint256 amount)"
    );
    string public constant PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH_STUB =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("Permit2");
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

    error SignatureExpired(uint256 signatureDeadline);
    error InvalidAmount(uint256 maxAmount);
    error InvalidNonce();
    error InvalidSignature();
    error InvalidSignatureLength();
    error InvalidSigner();
    error InvalidContractSignature();
    error TransferFailed();

    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(EIP712_DOMAIN_TYPEHASH, NAME_HASH, block.chainid, address(this)));
    }

    function permitTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes calldata signature
    ) external {
        bytes32 dataHash = keccak256(
            abi.encode(
                PERMIT_TRANSFER_FROM_TYPEHASH,
                _hashTokenPermissions(permit.permitted),
                msg.sender,
                permit.nonce,
                permit.deadline
            )
        );
        _permitTransferFrom(permit, transferDetails, owner, dataHash, signature);
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        bytes32 typeHash = keccak256(abi.encodePacked(PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH_STUB, witnessTypeString));
        bytes32 dataHash = keccak256(
            abi.encode(typeHash, _hashTokenPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline, witness)
        );
        _permitTransferFrom(permit, transferDetails, owner, dataHash, signature);
    }

    /// Marks the nonces of `mask` in word `wordPos` as used, so no permit signed with them can be spent.
    function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external {
        nonceBitmap[msg.sender][wordPos] |= mask;
        emit UnorderedNonceInvalidation(msg.sender, wordPos, mask);
    }

    function _hashTokenPermissions(TokenPermissions calldata permitted) private pure returns (bytes32) {
        return keccak256(abi.encode(TOKEN_PERMISSIONS_TYPEHASH, permitted.token, permitted.amount));
    }

    function _permitTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 dataHash,
        bytes calldata signature
    ) private {
        if (block.timestamp > permit.deadline) revert SignatureExpired(permit.deadline);
        if (transferDetails.requestedAmount > permit.permitted.amount) revert InvalidAmount(permit.permitted.amount);
        _useUnorderedNonce(owner, permit.nonce);
        _verify(signature, keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), dataHash)), owner);
        _safeTransferFrom(permit.permitted.token, owner, transferDetails.to, transferDetails.requestedAmount);
    }

    function _useUnorderedNonce(address from, uint256 nonce) private {
        uint256 wordPos = nonce >> 8;
        uint256 bit = 1 << (nonce & 0xff);
        uint256 flipped = nonceBitmap[from][wordPos] ^= bit;
        if (flipped & bit == 0) revert InvalidNonce();
    }

    /// As Permit2's SignatureVerification: a claimed signer with code is asked through ERC-1271; any
    /// other by ECDSA recovery of a 65-byte or (EIP-2098) 64-byte signature.
    function _verify(bytes calldata signature, bytes32 hash, address claimedSigner) private view {
        if (claimedSigner.code.length > 0) {
            bytes4 magicValue = IERC1271(claimedSigner).isValidSignature(hash, signature);
            if (magicValue != ERC1271_MAGIC_VALUE) revert InvalidContractSignature();
            return;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            (r, s) = abi.decode(signature, (bytes32, bytes32));
            v = uint8(signature[64]);
        } else if (signature.length == 64) {
            bytes32 vs;
            (r, vs) = abi.decode(signature, (bytes32, bytes32));
            s = vs & bytes32(0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff);
            v = uint8(uint256(vs >> 255)) + 27;
        } else {
            revert InvalidSignatureLength();
        }
        address signer = ecrecover(hash, v, r, s);
        if (signer == address(0)) revert InvalidSignature();
        if (signer != claimedSigner) revert InvalidSigner();
    }

    /// As solmate's SafeTransferLib: a call that reverts, or returns false, fails the transfer.
    function _safeTransferFrom(address token, address from, address to, uint256 amount) private {
        (bool success, bytes memory data) =
            token.call(abi.encodeWithSelector(IERC20Minimal.transferFrom.selector, from, to, amount));
        if (!success || (data.length > 0 && !abi.decode(data, (bool))) || token.code.length == 0) {
            revert TransferFailed();
        }
    }
}

/// @title The part both x402 Permit2 proxies share
/// @notice Written from x402's public interface of x402ExactPermit2Proxy and x402UptoPermit2Proxy
/// (the ABI the x402 EVM package calls, its witness types and its errors). A payer approves Permit2 once, then
/// signs a Permit2 witness transfer whose spender is the proxy and whose witness names the
/// recipient (and, for upto, the facilitator allowed to settle): the proxy alone can spend the
/// permit, and only to that recipient, from validAfter on.
/// @dev No constructor and no immutables (runtime code planted with hardhat_setCode); Permit2 is
/// the canonical address. The reentrancy guard's slot starts at zero on a planted copy.
abstract contract X402Permit2ProxyBase {
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    // solhint-disable-next-line var-name-mixedcase
    Permit2 public constant PERMIT2 = Permit2(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    bool private entered;

    event Settled();
    event SettledWithPermit();

    error InvalidDestination();
    error InvalidOwner();
    error InvalidPermit2Address();
    error PaymentTooEarly();
    error Permit2612AmountMismatch();
    error ReentrancyGuardReentrantCall();

    modifier nonReentrant() {
        if (entered) revert ReentrancyGuardReentrantCall();
        entered = true;
        _;
        entered = false;
    }

    function _checkTransfer(address owner, address to, uint256 validAfter) internal view {
        if (address(PERMIT2).code.length == 0) revert InvalidPermit2Address();
        if (owner == address(0)) revert InvalidOwner();
        if (to == address(0)) revert InvalidDestination();
        if (block.timestamp < validAfter) revert PaymentTooEarly();
    }

    /// Approves Permit2 on the owner's behalf with an EIP-2612 permit for at least the permitted
    /// amount. A permit already used (its approval in place) is no failure, as in x402's proxies.
    function _executePermit(address token, address owner, EIP2612Permit calldata permit2612, uint256 amount)
        internal
    {
        if (permit2612.value < amount) revert Permit2612AmountMismatch();
        try IERC20Permit(token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {} catch {}
    }
}

/// @title x402ExactPermit2Proxy
/// @notice Moves exactly the permitted amount to the witness's recipient.
contract x402ExactPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    error InvalidAmount();

    function settle(
        Permit2.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        Permit2.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _executePermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settle(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        Permit2.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        _checkTransfer(owner, witness.to, witness.validAfter);
        if (permit.permitted.amount == 0) revert InvalidAmount();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            Permit2.SignatureTransferDetails({to: witness.to, requestedAmount: permit.permitted.amount}),
            owner,
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter)),
            WITNESS_TYPE_STRING,
            signature
        );
    }
}

/// @title x402UptoPermit2Proxy
/// @notice Moves any amount up to the permitted one to the witness's recipient, sent by the
/// facilitator the witness names (the payer signed the maximum; the server settles what was used).
contract x402UptoPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();

    function settle(
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _executePermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        Permit2.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        _checkTransfer(owner, witness.to, witness.validAfter);
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        if (witness.facilitator != msg.sender) revert UnauthorizedFacilitator();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            Permit2.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter)),
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
