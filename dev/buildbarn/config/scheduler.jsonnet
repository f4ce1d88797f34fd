// bb_scheduler: the queue, in memory. Clients reach it through bb_storage (BB_SCHEDULER_CLIENTS),
// workers directly (BB_SCHEDULER_WORKERS).
local common = import 'common.libsonnet';

{
  clientGrpcServers: [common.grpcServer(std.extVar('BB_SCHEDULER_CLIENTS'))],
  workerGrpcServers: [common.grpcServer(std.extVar('BB_SCHEDULER_WORKERS'))],
  browserUrl: 'http://127.0.0.1/',
  contentAddressableStorage: common.storageClient,
  maximumMessageSizeBytes: common.maximumMessageSizeBytes,
  global: common.global,
  executeAuthorizer: common.allow,
  modifyDrainsAuthorizer: common.allow,
  killOperationsAuthorizer: common.allow,
  synchronizeAuthorizer: common.allow,
  actionRouter: {
    simple: {
      // Actions are queued by their Action's platform properties, which must equal a worker's.
      platformKeyExtractor: { action: {} },
      invocationKeyExtractors: [],
      initialSizeClassAnalyzer: {
        defaultExecutionTimeout: '1800s',
        maximumExecutionTimeout: '7200s',
      },
    },
  },
  // A platform queue outlives its last worker this long, so a worker that restarts finds its
  // queued actions still there.
  platformQueueWithNoWorkersTimeout: '900s',
}
