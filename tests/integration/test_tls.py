"""HTTPS to the store on a real mount: flowfs's TLS (rustls with ring,
crates/flowfs-client/src/tls.rs) through a TLS-terminating counting proxy in front of
SeaweedFS, with a self-signed certificate for 127.0.0.1. Trusted (`SSL_CERT_FILE`, as on
a node with a site CA), the mount reads and writes over it; not trusted, it does not mount
and says why."""

from __future__ import annotations

import ssl
import subprocess

from flowfs_mount import mount_args, run_mount
from helpers import MiB, payload, put_many
from s3proxy import CountingProxy
from write_helpers import object_bytes


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _certificate(d):
    """A CA (what `SSL_CERT_FILE` trusts) and a server certificate it signed for 127.0.0.1:
    rustls takes no self-signed CA certificate as a server's own."""
    ca, ca_key, key, csr, cert = (d / n for n in ("ca.pem", "ca.key", "key.pem", "req.csr", "cert.pem"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
             "-days", "2", "-subj", "/CN=flowfs test CA")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = d / "ext.cnf"
    ext.write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(ext))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ca, ctx


def test_a_mount_over_https_reads_and_writes(mount, s3, bucket, seaweed, work_dir, monkeypatch):
    cert, ctx = _certificate(work_dir)
    data = payload(3 * MiB + 7, "tls")
    put_many(s3, bucket, {"in/a.bin": data})
    with CountingProxy(seaweed.endpoint, tls=ctx) as proxy:
        assert proxy.endpoint.startswith("https://")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        m = mount(bucket, proxy=proxy)
        assert (m / "in/a.bin").read_bytes() == data
        (m / "out.txt").write_bytes(b"over tls\n")
        assert m.unmount().returncode == 0
        assert proxy.count("GET", "GET_RANGE") >= 1 and proxy.count("PUT") >= 1, proxy.stats.summary()
    assert object_bytes(s3, bucket, "out.txt") == b"over tls\n"


def test_an_untrusted_certificate_is_refused_with_a_reason(mount, bucket, seaweed, work_dir, monkeypatch):
    _, ctx = _certificate(work_dir)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with CountingProxy(seaweed.endpoint, tls=ctx) as proxy:
        mp = work_dir / "mnt"
        mp.mkdir()
        args = mount_args(f"s3://{bucket}", mp, cache_dir=work_dir / "cache", log_file=None, pid_file=None,
                          endpoint=proxy.endpoint)
        r = run_mount(args, mount.env(proxy.endpoint), timeout=120)
        assert r.returncode != 0, r.stdout
        # The bucket's name says "certificate" too: the reason is asked for after it.
        reason = r.stderr.split("connection failed", 1)[-1]
        assert r.stderr.startswith("flowfs: ") and "certificate" in reason.lower(), r.stderr
        assert proxy.count("HEAD", "LIST", "GET") == 0, "a request went through an untrusted server"
