# execproto on Nomad: `execproto serve` on wss://0.0.0.0:8765 of a client node, every process
# it runs inside bubblewrap.
#
# The raw_exec driver, with execproto installed on the node as for deploy/systemd (`pip
# install .`, Debian's bubblewrap and passt, a user `execproto` with uid and gid 10001, as in
# the image). Not the docker driver: bubblewrap needs an unmasked /proc, and
# `systempaths=unconfined` is a docker command-line option that the CLI turns into empty
# masked paths, not a security option the daemon takes through its API, which is what Nomad
# talks to. raw_exec must be enabled on the client (plugin "raw_exec" { config { enabled =
# true } }); the task runs as `user`, and Nomad kills whatever is left of its process tree.
#
# Fill in: datacenters; the Nomad variable nomad/jobs/execproto with the items token, tls_crt
# and tls_key (the certificate must name the address clients use):
#   nomad var put nomad/jobs/execproto token="$(cat token)" tls_crt="$(cat server.pem)" \
#     tls_key="$(cat server.key)"
# A changed token or certificate is rendered again and the task gets SIGHUP: the server reads
# the files again (and would at its next connection anyway) without stopping what runs; while
# only one of the certificate and its key is new, the last pair keeps serving.
job "execproto" {
  datacenters = ["dc1"]
  type        = "service"

  group "execproto" {
    count = 1

    network {
      port "wss" {
        static = 8765
      }
    }

    # Consul runs these checks (the default provider): HTTPS without verifying the
    # certificate, as the kubelet does, and no token (the probes need none).
    service {
      name = "execproto"
      port = "wss"

      # 503 while draining: the service is taken out of the catalogue, nothing restarts it.
      check {
        name            = "ready"
        type            = "http"
        protocol        = "https"
        tls_skip_verify = true
        path            = "/readyz"
        interval        = "5s"
        timeout         = "2s"
      }

      check {
        name            = "alive"
        type            = "http"
        protocol        = "https"
        tls_skip_verify = true
        path            = "/livez"
        interval        = "10s"
        timeout         = "3s"

        check_restart {
          limit = 3
          grace = "10s"
        }
      }
    }

    task "serve" {
      driver = "raw_exec"
      user   = "execproto"

      # Nomad's default is SIGINT, which drains too; SIGTERM says it plainly. kill_timeout is
      # above --drain-grace (20) and within the client's max_kill_timeout (30s by default).
      kill_signal  = "SIGTERM"
      kill_timeout = "25s"

      config {
        command = "/usr/local/bin/execproto"
        args = [
          "serve",
          "--listen", "wss://0.0.0.0:8765",
          "--tls-cert", "${NOMAD_SECRETS_DIR}/tls.crt",
          "--tls-key", "${NOMAD_SECRETS_DIR}/tls.key",
          "--auth-token-file", "${NOMAD_SECRETS_DIR}/token",
          "--drain-grace", "20",
          "--sandbox", "bwrap",
          "--writable-root", "${NOMAD_TASK_DIR}",
          "--log-format", "json",
        ]
      }

      template {
        data          = "{{ with nomadVar \"nomad/jobs/execproto\" }}{{ .token }}{{ end }}"
        destination   = "${NOMAD_SECRETS_DIR}/token"
        perms         = "0400"
        uid           = 10001
        gid           = 10001
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      template {
        data          = "{{ with nomadVar \"nomad/jobs/execproto\" }}{{ .tls_crt }}{{ end }}"
        destination   = "${NOMAD_SECRETS_DIR}/tls.crt"
        perms         = "0400"
        uid           = 10001
        gid           = 10001
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      template {
        data          = "{{ with nomadVar \"nomad/jobs/execproto\" }}{{ .tls_key }}{{ end }}"
        destination   = "${NOMAD_SECRETS_DIR}/tls.key"
        perms         = "0400"
        uid           = 10001
        gid           = 10001
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
