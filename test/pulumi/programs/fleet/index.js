// A test program driven by stack config: one ProxyFleet per key of
//   fleet:fleets  {fleetName: ProxyFleetArgs}
// Exports each fleet's member IDs and hosts.
const pulumi = require("@pulumi/pulumi");
const { ProxyFleet } = require("pulumi-kvm-proxy");

const config = new pulumi.Config("fleet");
const fleets = {};
for (const [name, args] of Object.entries(config.getObject("fleets") ?? {})) {
  fleets[name] = new ProxyFleet(name, args);
}

exports.ids = Object.fromEntries(Object.entries(fleets).map(([n, f]) => [n, f.ids]));
exports.hosts = Object.fromEntries(Object.entries(fleets).map(([n, f]) => [n, f.hosts]));
