// bb_worker: fetches each action's input root into a native build directory (hard links from
// its cache) and has bb_runner (BB_RUNNER, host:port) run the command there.
local common = import 'common.libsonnet';

{
  blobstore: {
    contentAddressableStorage: common.storageClient,
    actionCache: common.storageClient,
  },
  browserUrl: 'http://127.0.0.1/',
  maximumMessageSizeBytes: common.maximumMessageSizeBytes,
  scheduler: { address: std.extVar('BB_SCHEDULER_WORKERS') },
  global: common.global,
  buildDirectories: [{
    native: {
      buildDirectoryPath: common.dir + '/build',
      cacheDirectoryPath: common.dir + '/cache',
      maximumCacheFileCount: 10000,
      maximumCacheSizeBytes: 1024 * 1024 * 1024,
      cacheReplacementPolicy: 'LEAST_RECENTLY_USED',
    },
    runners: [{
      endpoint: { address: std.extVar('BB_RUNNER') },
      concurrency: std.parseInt(std.extVar('BB_CONCURRENCY')),
      maximumFilePoolFileCount: 10000,
      maximumFilePoolSizeBytes: 1024 * 1024 * 1024,
      // The platform properties this worker takes, as a JSON list of {name, value} sorted by
      // name: an action runs here only if its platform is exactly this.
      platform: { properties: std.parseJson(std.extVar('BB_PLATFORM')) },
      // ExecutedActionMetadata.worker is this map as JSON, plus the runner's thread.
      workerId: { name: std.extVar('BB_WORKER_NAME') },
    }],
  }],
  filePool: { blockDevice: { file: { path: common.dir + '/filepool', sizeBytes: 1024 * 1024 * 1024 } } },
  // Blobs fetched and uploaded at once, for all the runner's slots together.
  inputDownloadConcurrency: std.parseInt(std.extVar('BB_TRANSFER_CONCURRENCY')),
  outputUploadConcurrency: std.parseInt(std.extVar('BB_TRANSFER_CONCURRENCY')),
  directoryCache: {
    maximumCount: 1000,
    maximumSizeBytes: 1024 * 1024,
    cacheReplacementPolicy: 'LEAST_RECENTLY_USED',
  },
}
