// KVM virtual machines running secured HTTP (and SOCKS5) forward proxies on your own libvirt hosts, over libvirt's remote protocol.
package kvmproxy
