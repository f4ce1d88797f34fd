// bb_runner: runs each command in the worker's build directory, with the Command's
// environment only (no PATH of its own: argv[0] is an absolute path, remote_compiler).
local common = import 'common.libsonnet';

{
  buildDirectoryPath: common.dir + '/build',
  global: common.global,
  grpcServers: [common.grpcServer(std.extVar('BB_RUNNER'))],
}
