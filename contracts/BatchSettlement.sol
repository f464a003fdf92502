// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The ERC-20 calls the channels contract and the collectors make.
interface IERC20Minimal {
    function transfer(address to, uint256 value) external returns (bool);
    function balanceOf(address owner) external view returns (uint256);
}

/// ERC-3009, as USDC implements it (the signature as bytes, which also admits ERC-1271 payers).
interface IERC3009Receive {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// EIP-2612, tried by the Permit2 collector before the transfer when the payer sent a permit.
interface IERC20PermitMinimal {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// The witness transfer of Permit2 (SignatureTransfer), as contracts/Permit2.sol answers it.
interface IPermit2Witness {
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

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// ERC-1271, asked when a payer or an authorizer is a contract.
interface IERC1271 {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

/// What x402BatchSettlement asks of a deposit collector: move `amount` of `token` from `payer` to
/// the channels contract, under the authorization the payer signed for this channel.
interface IDepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external;
}

/// Signature checks shared by the three contracts: ECDSA (65-byte or EIP-2098 64-byte signatures,
/// low s) for an address without code, ERC-1271 for a contract.
library SignatureCheck {
    bytes4 internal constant ERC1271_MAGIC_VALUE = 0x1626ba7e;
    uint256 internal constant HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    /// The ECDSA signer of `digest`, or the zero address when the signature is malformed.
    function recover(bytes32 digest, bytes memory signature) internal pure returns (address) {
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            assembly {
                r := mload(add(signature, 0x20))
                s := mload(add(signature, 0x40))
                v := byte(0, mload(add(signature, 0x60)))
            }
        } else if (signature.length == 64) {
            bytes32 vs;
            assembly {
                r := mload(add(signature, 0x20))
                vs := mload(add(signature, 0x40))
            }
            s = vs & bytes32(0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff);
            v = uint8((uint256(vs) >> 255) + 27);
        } else {
            return address(0);
        }
        if (uint256(s) > HALF_ORDER) return address(0);
        if (v < 27) v += 27;
        if (v != 27 && v != 28) return address(0);
        return ecrecover(digest, v, r, s);
    }

    /// ECDSA against `signer` only: the payer authorizer's rule (an EOA, no chain read).
    function isValidECDSA(address signer, bytes32 digest, bytes memory signature) internal pure returns (bool) {
        if (signer == address(0)) return false;
        return recover(digest, signature) == signer;
    }

    /// ERC-1271 when `signer` has code, ECDSA otherwise.
    function isValidNow(address signer, bytes32 digest, bytes memory signature) internal view returns (bool) {
        if (signer == address(0)) return false;
        if (signer.code.length == 0) return recover(digest, signature) == signer;
        (bool ok, bytes memory answer) =
            signer.staticcall(abi.encodeWithSelector(IERC1271.isValidSignature.selector, digest, signature));
        return ok && answer.length >= 32 && abi.decode(answer, (bytes4)) == ERC1271_MAGIC_VALUE;
    }
}

/// @title x402BatchSettlement
/// @notice Payment channels of x402's `batch-settlement` scheme, written for local chains from the
/// scheme's specification (specs/schemes/batch-settlement/scheme_batch_settlement_evm.md) and the
/// calls the x402 TypeScript packages (version 2.27) make, planted at the canonical address
/// 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003.
///
/// A channel is the EIP-712 hash of its immutable ChannelConfig under the domain
/// {name: "x402 Batch Settlement", version: "1", chainId, verifyingContract}. A payer deposits into
/// it through one of the two canonical deposit collectors; the channel keeps `balance` (deposits
/// less refunds and withdrawals) and `totalClaimed` (what the receiver has claimed, cumulative). The
/// payer signs cumulative vouchers (Voucher(bytes32 channelId,uint128 maxClaimableAmount)) with its
/// payerAuthorizer (ECDSA) or, when that is zero, as the payer (ERC-1271 or ECDSA). The receiver
/// side claims vouchers for many channels in one call (no token moves: the claimed amounts are
/// credited to receivers[receiver][token]) and settles a receiver's claimed funds in one transfer.
/// It may refund unclaimed escrow to the payer at any time (each refund advances the channel's
/// refundNonce, even when nothing is left to move). The payer's escape hatch is a timed withdrawal:
/// initiateWithdraw, then finalizeWithdraw once withdrawDelay has passed, paying out whatever is
/// still unclaimed then (at most the amount asked).
/// @dev No constructor and no immutables: the runtime code is the same wherever it is planted, and
/// the domain separator is computed from block.chainid and address(this) on every call. The
/// reentrancy lock is in transient storage (EIP-1153, Cancun).
contract x402BatchSettlement {
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    /// One row of a claim: the payer's voucher and the channel's new cumulative `totalClaimed`
    /// (at most the voucher's ceiling and the channel's balance; a row at or below the channel's
    /// current total changes nothing).
    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct WithdrawalRequest {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    uint40 public constant MIN_WITHDRAW_DELAY = 15 minutes;
    uint40 public constant MAX_WITHDRAW_DELAY = 30 days;
    address public constant ERC3009_DEPOSIT_COLLECTOR = 0x4020806089470a89826cB9fB1f4059150b550004;
    address public constant PERMIT2_DEPOSIT_COLLECTOR = 0x4020425FAf3B746C082C2f942b4E5159887B0005;

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("x402 Batch Settlement");
    bytes32 private constant VERSION_HASH = keccak256("1");
    /// Transient slot of the reentrancy lock: keccak256("x402BatchSettlement.lock").
    bytes32 private constant LOCK_SLOT = keccak256("x402BatchSettlement.lock");

    mapping(bytes32 channelId => ChannelState) public channels;
    mapping(bytes32 channelId => WithdrawalRequest) public pendingWithdrawals;
    mapping(bytes32 channelId => uint256) public refundNonce;
    mapping(address receiver => mapping(address token => ReceiverState)) public receivers;

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance);
    event Claimed(bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount);

    error InvalidChannelConfig();
    error WithdrawDelayOutOfRange(uint40 withdrawDelay);
    error ZeroAmount();
    error UnknownCollector(address collector);
    error DepositShortfall(uint256 expected, uint256 received);
    error BalanceOverflow();
    error InvalidVoucherSignature(bytes32 channelId);
    error ClaimExceedsVoucher(bytes32 channelId, uint128 totalClaimed, uint128 maxClaimableAmount);
    error ClaimExceedsBalance(bytes32 channelId, uint128 totalClaimed, uint128 balance);
    error NotReceiverSide(bytes32 channelId, address caller);
    error NotPayerSide(bytes32 channelId, address caller);
    error EmptyClaim();
    error MixedReceiverAuthorizers();
    error InvalidAuthorizerSignature();
    error InvalidRefundNonce(uint256 expected, uint256 given);
    error WithdrawAlreadyPending(bytes32 channelId);
    error NoPendingWithdraw(bytes32 channelId);
    error WithdrawExceedsAvailable(uint128 amount, uint128 available);
    error WithdrawDelayNotElapsed(uint40 finalizeAfter);
    error TransferFailed();
    error Reentrancy();

    modifier nonReentrant() {
        bytes32 slot = LOCK_SLOT;
        uint256 locked;
        assembly {
            locked := tload(slot)
        }
        if (locked != 0) revert Reentrancy();
        assembly {
            tstore(slot, 1)
        }
        _;
        assembly {
            tstore(slot, 0)
        }
    }

    // ---------------------------------------------------------------- EIP-712

    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(EIP712_DOMAIN_TYPEHASH, NAME_HASH, VERSION_HASH, block.chainid, address(this)));
    }

    /// ERC-5267.
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory name,
            string memory version,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        return (hex"0f", "x402 Batch Settlement", "1", block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _typedDataHash(
            keccak256(
                abi.encode(
                    CHANNEL_CONFIG_TYPEHASH,
                    config.payer,
                    config.payerAuthorizer,
                    config.receiver,
                    config.receiverAuthorizer,
                    config.token,
                    config.withdrawDelay,
                    config.salt
                )
            )
        );
    }

    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _typedDataHash(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _typedDataHash(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            VoucherClaim calldata row = voucherClaims[i];
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH,
                    getChannelId(row.voucher.channel),
                    row.voucher.maxClaimableAmount,
                    row.totalClaimed
                )
            );
        }
        return _typedDataHash(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }

    // ---------------------------------------------------------------- deposits

    /// Moves `amount` from the payer into the channel through a canonical collector, which uses the
    /// authorization in `collectorData` (ERC-3009 or Permit2). Anyone may submit it: the payer's
    /// authorization is bound to this channel. The first deposit creates the channel.
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        _checkConfig(config);
        if (amount == 0) revert ZeroAmount();
        if (collector != ERC3009_DEPOSIT_COLLECTOR && collector != PERMIT2_DEPOSIT_COLLECTOR) {
            revert UnknownCollector(collector);
        }
        bytes32 channelId = getChannelId(config);
        IERC20Minimal token = IERC20Minimal(config.token);
        uint256 before = token.balanceOf(address(this));
        IDepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
        uint256 received = token.balanceOf(address(this)) - before;
        if (received != amount) revert DepositShortfall(amount, received);

        ChannelState storage channel = channels[channelId];
        if (channel.balance == 0 && channel.totalClaimed == 0) emit ChannelCreated(channelId, config);
        if (uint256(channel.balance) + amount > type(uint128).max) revert BalanceOverflow();
        channel.balance += amount;
        emit Deposited(channelId, msg.sender, amount, channel.balance);
    }

    // ---------------------------------------------------------------- claims

    /// Claims by the receiver or its authorizer, who must be the caller for every row.
    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        if (voucherClaims.length == 0) revert EmptyClaim();
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            ChannelConfig calldata config = voucherClaims[i].voucher.channel;
            if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) {
                revert NotReceiverSide(getChannelId(config), msg.sender);
            }
            _claim(voucherClaims[i]);
        }
    }

    /// Claims relayed by anyone, authorized by one EIP-712 ClaimBatch signature of the rows'
    /// common receiverAuthorizer.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        if (voucherClaims.length == 0) revert EmptyClaim();
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        for (uint256 i = 1; i < voucherClaims.length; i++) {
            if (voucherClaims[i].voucher.channel.receiverAuthorizer != authorizer) revert MixedReceiverAuthorizers();
        }
        if (!SignatureCheck.isValidNow(authorizer, getClaimBatchDigest(voucherClaims), authorizerSignature)) {
            revert InvalidAuthorizerSignature();
        }
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            _claim(voucherClaims[i]);
        }
    }

    /// Transfers everything claimed and not yet settled for `receiver` in `token`, in one transfer.
    /// Permissionless: the funds only ever go to the receiver.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage state = receivers[receiver][token];
        uint128 amount = state.totalClaimed - state.totalSettled;
        if (amount == 0) return;
        state.totalSettled = state.totalClaimed;
        _send(token, receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    // ---------------------------------------------------------------- refunds

    /// Cooperative refund by the receiver or its authorizer.
    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        bytes32 channelId = getChannelId(config);
        if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) {
            revert NotReceiverSide(channelId, msg.sender);
        }
        _refund(config, channelId, amount);
    }

    /// Cooperative refund relayed by anyone, authorized by the receiverAuthorizer's EIP-712 Refund
    /// signature over the channel's current refundNonce and this amount.
    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 channelId = getChannelId(config);
        uint256 expected = refundNonce[channelId];
        if (nonce != expected) revert InvalidRefundNonce(expected, nonce);
        if (
            !SignatureCheck.isValidNow(
                config.receiverAuthorizer, getRefundDigest(channelId, nonce, amount), receiverAuthorizerSignature
            )
        ) revert InvalidAuthorizerSignature();
        _refund(config, channelId, amount);
    }

    // ---------------------------------------------------------------- timed withdrawal

    /// Starts the payer's withdrawal of `amount` (at most the unclaimed escrow now); it can be
    /// finalized once the channel's withdrawDelay has passed. The receiver should claim before then.
    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        bytes32 channelId = _payerSide(config);
        if (amount == 0) revert ZeroAmount();
        WithdrawalRequest storage request = pendingWithdrawals[channelId];
        if (request.initiatedAt != 0) revert WithdrawAlreadyPending(channelId);
        ChannelState storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        if (amount > available) revert WithdrawExceedsAvailable(amount, available);
        uint40 now40 = uint40(block.timestamp);
        request.amount = amount;
        request.initiatedAt = now40;
        emit WithdrawInitiated(channelId, amount, now40 + config.withdrawDelay);
    }

    /// Pays the pending withdrawal to the payer, capped at what is still unclaimed.
    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        bytes32 channelId = _payerSide(config);
        WithdrawalRequest memory request = pendingWithdrawals[channelId];
        if (request.initiatedAt == 0) revert NoPendingWithdraw(channelId);
        uint40 finalizeAfter = request.initiatedAt + config.withdrawDelay;
        if (block.timestamp < finalizeAfter) revert WithdrawDelayNotElapsed(finalizeAfter);
        delete pendingWithdrawals[channelId];
        ChannelState storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        uint128 amount = request.amount < available ? request.amount : available;
        if (amount > 0) {
            channel.balance -= amount;
            _send(config.token, config.payer, amount);
        }
        emit WithdrawFinalized(channelId, msg.sender, amount);
        if (amount > 0 && channel.balance == 0) emit ChannelClosed(channelId, config);
    }

    // ---------------------------------------------------------------- batching

    /// Runs several calls on this contract in one transaction (e.g. a claim and a refund); any
    /// failure reverts them all with the failing call's reason.
    function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
        results = new bytes[](data.length);
        for (uint256 i = 0; i < data.length; i++) {
            (bool ok, bytes memory answer) = address(this).delegatecall(data[i]);
            if (!ok) {
                assembly {
                    revert(add(answer, 0x20), mload(answer))
                }
            }
            results[i] = answer;
        }
    }

    // ---------------------------------------------------------------- internals

    function _typedDataHash(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked(hex"1901", DOMAIN_SEPARATOR(), structHash));
    }

    function _checkConfig(ChannelConfig calldata config) private pure {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0)
        ) revert InvalidChannelConfig();
        if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY) {
            revert WithdrawDelayOutOfRange(config.withdrawDelay);
        }
    }

    function _payerSide(ChannelConfig calldata config) private view returns (bytes32 channelId) {
        channelId = getChannelId(config);
        if (msg.sender != config.payer && (config.payerAuthorizer == address(0) || msg.sender != config.payerAuthorizer))
        {
            revert NotPayerSide(channelId, msg.sender);
        }
    }

    function _claim(VoucherClaim calldata row) private {
        ChannelConfig calldata config = row.voucher.channel;
        bytes32 channelId = getChannelId(config);
        uint128 ceiling = row.voucher.maxClaimableAmount;
        bytes32 digest = getVoucherDigest(channelId, ceiling);
        bool signed = config.payerAuthorizer != address(0)
            ? SignatureCheck.isValidECDSA(config.payerAuthorizer, digest, row.signature)
            : SignatureCheck.isValidNow(config.payer, digest, row.signature);
        if (!signed) revert InvalidVoucherSignature(channelId);
        if (row.totalClaimed > ceiling) revert ClaimExceedsVoucher(channelId, row.totalClaimed, ceiling);
        ChannelState storage channel = channels[channelId];
        if (row.totalClaimed > channel.balance) revert ClaimExceedsBalance(channelId, row.totalClaimed, channel.balance);
        if (row.totalClaimed <= channel.totalClaimed) return;
        uint128 claimAmount = row.totalClaimed - channel.totalClaimed;
        channel.totalClaimed = row.totalClaimed;
        receivers[config.receiver][config.token].totalClaimed += claimAmount;
        emit Claimed(channelId, msg.sender, claimAmount, row.totalClaimed);
    }

    /// The nonce advances first, so a refund that finds nothing to move still uses it up.
    function _refund(ChannelConfig calldata config, bytes32 channelId, uint128 amount) private {
        refundNonce[channelId] += 1;
        ChannelState storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        uint128 refunded = amount < available ? amount : available;
        if (refunded == 0) return;
        channel.balance -= refunded;
        WithdrawalRequest storage request = pendingWithdrawals[channelId];
        if (request.initiatedAt != 0) {
            if (refunded >= request.amount) delete pendingWithdrawals[channelId];
            else request.amount -= refunded;
        }
        _send(config.token, config.payer, refunded);
        emit Refunded(channelId, msg.sender, refunded);
        if (channel.balance == 0) emit ChannelClosed(channelId, config);
    }

    function _send(address token, address to, uint256 amount) private {
        (bool ok, bytes memory answer) =
            token.call(abi.encodeWithSelector(IERC20Minimal.transfer.selector, to, amount));
        if (!ok || (answer.length != 0 && !abi.decode(answer, (bool)))) revert TransferFailed();
    }
}

/// @title ERC3009DepositCollector
/// @notice Collects a channel deposit with the payer's ERC-3009 receiveWithAuthorization, made out
/// to this collector (canonical address 0x4020806089470a89826cB9fB1f4059150b550004) with the nonce
/// keccak256(abi.encode(channelId, salt)), and forwards it to x402BatchSettlement. Only the
/// channels contract may call it, so an authorization can only ever fund the channel it names.
/// @dev collectorData = abi.encode(uint256 validAfter, uint256 validBefore, uint256 salt, bytes signature).
contract ERC3009DepositCollector is IDepositCollector {
    address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

    error OnlyBatchSettlement();
    error TransferFailed();

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != BATCH_SETTLEMENT) revert OnlyBatchSettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        IERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, nonce, signature
        );
        (bool ok, bytes memory answer) =
            token.call(abi.encodeWithSelector(IERC20Minimal.transfer.selector, BATCH_SETTLEMENT, amount));
        if (!ok || (answer.length != 0 && !abi.decode(answer, (bool)))) revert TransferFailed();
    }
}

/// @title Permit2DepositCollector
/// @notice Collects a channel deposit with the payer's Permit2 witness transfer (spender: this
/// collector, canonical address 0x4020425FAf3B746C082C2f942b4E5159887B0005; witness
/// DepositWitness(bytes32 channelId)), straight into x402BatchSettlement. An EIP-2612 permit for
/// Permit2, when sent along, is tried first (a permit already used is not an error). Only the
/// channels contract may call it.
/// @dev collectorData = abi.encode(uint256 nonce, uint256 deadline, bytes permit2Signature, bytes eip2612PermitData),
/// eip2612PermitData empty or abi.encode(uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s).
contract Permit2DepositCollector is IDepositCollector {
    address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;
    address public constant PERMIT2 = 0x000000000022D473030F116dDEE9F6B43aC78BA3;
    bytes32 public constant DEPOSIT_WITNESS_TYPEHASH = keccak256("DepositWitness(bytes32 channelId)");
    string public constant WITNESS_TYPE_STRING =
        "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)";

    error OnlyBatchSettlement();

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != BATCH_SETTLEMENT) revert OnlyBatchSettlement();
        (uint256 nonce, uint256 deadline, bytes memory signature, bytes memory eip2612PermitData) =
            abi.decode(collectorData, (uint256, uint256, bytes, bytes));
        if (eip2612PermitData.length > 0) _tryPermit(payer, token, eip2612PermitData);
        IPermit2Witness(PERMIT2).permitWitnessTransferFrom(
            IPermit2Witness.PermitTransferFrom({
                permitted: IPermit2Witness.TokenPermissions({token: token, amount: amount}),
                nonce: nonce,
                deadline: deadline
            }),
            IPermit2Witness.SignatureTransferDetails({to: BATCH_SETTLEMENT, requestedAmount: amount}),
            payer,
            keccak256(abi.encode(DEPOSIT_WITNESS_TYPEHASH, channelId)),
            WITNESS_TYPE_STRING,
            signature
        );
    }

    function _tryPermit(address payer, address token, bytes memory eip2612PermitData) private {
        (uint256 value, uint256 permitDeadline, uint8 v, bytes32 r, bytes32 s) =
            abi.decode(eip2612PermitData, (uint256, uint256, uint8, bytes32, bytes32));
        try IERC20PermitMinimal(token).permit(payer, PERMIT2, value, permitDeadline, v, r, s) {} catch {}
    }
}

/// @title Multicall3 (tryAggregate, aggregate3)
/// @notice The read-batching calls of the Multicall3 contract at its canonical address
/// 0xcA11bde05977b3631167028862bE2a173976CA11, which the x402 batch-settlement facilitator uses to
/// read a channel's state in one call (tryAggregate). Written from Multicall3's public interface.
contract Multicall3 {
    struct Call {
        address target;
        bytes callData;
    }

    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function tryAggregate(bool requireSuccess, Call[] calldata calls)
        public
        payable
        returns (Result[] memory returnData)
    {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory answer) = calls[i].target.call(calls[i].callData);
            if (requireSuccess) require(success, "Multicall3: call failed");
            returnData[i] = Result(success, answer);
        }
    }

    function aggregate3(Call3[] calldata calls) public payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory answer) = calls[i].target.call(calls[i].callData);
            if (!success && !calls[i].allowFailure) revert("Multicall3: call failed");
            returnData[i] = Result(success, answer);
        }
    }

    function getBlockNumber() external view returns (uint256) {
        return block.number;
    }

    function getCurrentBlockTimestamp() external view returns (uint256) {
        return block.timestamp;
    }

    function getChainId() external view returns (uint256) {
        return block.chainid;
    }
}
