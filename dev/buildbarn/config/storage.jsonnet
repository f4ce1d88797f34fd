// bb_storage: the CAS and the action cache, in memory; Execute forwarded to bb_scheduler
// when BB_SCHEDULER (host:port of its client server) is set, else a cache-only server.
local common = import 'common.libsonnet';
local scheduler = std.extVar('BB_SCHEDULER');
// TLS and bearer tokens, for the tests of a secured server: PEM certificate and key files,
// and a JSON Web Key Set file of the keys tokens may be signed with (empty: none).
local tlsCert = std.extVar('BB_TLS_CERT');
local tlsKey = std.extVar('BB_TLS_KEY');
local jwks = std.extVar('BB_JWKS');
local jwtAudience = std.extVar('BB_JWT_AUDIENCE');

local inMemory(entries, blockBytes) = {
  'local': {
    keyLocationMapInMemory: { entries: entries },
    keyLocationMapMaximumGetAttempts: 16,
    keyLocationMapMaximumPutAttempts: 64,
    oldBlocks: 4,
    currentBlocks: 8,
    newBlocks: 1,
    blocksInMemory: { blockSizeBytes: blockBytes },
  },
};

{
  grpcServers: [common.grpcServer(common.storage) + (
    if tlsCert == '' then {} else {
      tls: { serverKeyPair: { files: { certificatePath: tlsCert, privateKeyPath: tlsKey, refreshInterval: '3600s' } } },
    }
  ) + (
    if jwks == '' then {} else {
      // Buildbarn checks a token's signature against a key set of public keys (no shared
      // HMAC secret), its exp and nbf, and then this expression on its claims.
      authenticationPolicy: {
        jwt: {
          jwksFile: jwks,
          maximumCacheSize: 100,
          cacheReplacementPolicy: 'LEAST_RECENTLY_USED',
          claimsValidationJmespathExpression: { expression: "payload.aud == '%s'" % jwtAudience },
          metadataExtractionJmespathExpression: { expression: '`{}`' },
        },
      },
    }
  )],
  maximumMessageSizeBytes: common.maximumMessageSizeBytes,
  global: common.global,
  contentAddressableStorage: {
    backend: inMemory(1024 * 1024, 64 * 1024 * 1024),
    getAuthorizer: common.allow,
    putAuthorizer: common.allow,
    findMissingAuthorizer: common.allow,
  },
  actionCache: {
    // A result whose outputs the CAS lost is a miss, not a hit the client cannot use.
    backend: {
      completenessChecking: {
        backend: inMemory(64 * 1024, 4 * 1024 * 1024),
        maximumTotalTreeSizeBytes: 64 * 1024 * 1024,
      },
    },
    getAuthorizer: common.allow,
    putAuthorizer: common.allow,
  },
  executeAuthorizer: common.allow,
  schedulers: if scheduler == '' then {} else {
    // The empty prefix: every instance name goes to this scheduler, unchanged.
    '': { endpoint: { address: scheduler } },
  },
}
