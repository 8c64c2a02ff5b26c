# Sends CL.THROTTLE through redis-rb's Redis::Cluster (Debian's ruby-redis,
# redis-rb 4.8) and prints the replies as JSON. Run by TestClusterRedisRb
# (../clusterclients_test.go):
#
#   ruby throttle.rb '{"nodes":["redis://127.0.0.1:7000"],"keys":["a"],"calls":3,"name":"cl.throttle"}'
#
# Redis::Cluster finds a command's first key from COMMAND's reply, looked up
# by the command's name exactly as sent; COMMAND names commands in lower
# case, so "CL.THROTTLE" finds no key and goes to a random node (and follows
# the MOVED), while "cl.throttle" goes to the key's owner.
require 'json'
require 'redis'

cfg = JSON.parse(ARGV[0])
out = { 'results' => {}, 'errors' => [] }
begin
  r = Redis.new(cluster: cfg['nodes'])
  cfg['keys'].each do |k|
    out['results'][k] = (1..cfg['calls']).map { r.call(cfg['name'], k, 15, 30, 60) }
  end
  r.close
rescue StandardError => e
  out['errors'] << "#{e.class}: #{e.message}"
end
print JSON.generate(out)
