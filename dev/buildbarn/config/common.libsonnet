// What every process of the local Buildbarn shares. Each value comes from the environment of
// the process (Buildbarn passes its environment to Jsonnet as external variables); the test
// fixture, tests/buildbarn_server.py, sets them.
{
  // host:port of bb_storage, which serves the CAS and the action cache to everyone.
  storage: std.extVar('BB_STORAGE'),
  // This deployment's directory: block files, the worker's build and cache directories.
  dir: std.extVar('BB_DIR'),
  // As Buildbarn's reference deployment (bb-deployments) sets it. bb_storage refuses a
  // BatchReadBlobs whose blobs add up to more than this, and does not say so in its
  // capabilities (max_batch_total_size_bytes is 0).
  maximumMessageSizeBytes: 2 * 1024 * 1024,
  allow: { allow: {} },
  grpcServer(address): {
    listenAddresses: [address],
    authenticationPolicy: { allow: {} },
  },
  storageClient: { grpc: { client: { address: $.storage } } },
  // No diagnostics HTTP server, no tracing: only gRPC ports are opened.
  global: {},
}
