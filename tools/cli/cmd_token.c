/*
 * cmd_token: tokens for [client NAME] sections (docs/OPERATIONS.md, "Security"):
 * `gen-token FILE` writes a new random one, `hash-token [FILE]` prints the token_sha256 line
 * of one. Neither ever prints a token.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"

#include "cli.h"

/* gen-token FILE, hash-token [FILE]: tokens for [client NAME] sections. */
int
cli_cmd_token(const struct cli *o, const struct cli_cmd *c, int nargs, char **args)
{
    uint8_t raw[32], h[RL_AUTH_HASH_LEN];
    char token[RL_AUTH_TOKEN_MAX], hex[2 * RL_AUTH_HASH_LEN + 1], why[320];
    const char *cmd = cli_cmd_name(c);
    size_t len;
    int rc;

    if (strcmp(cmd, "gen-token") == 0) {
        FILE *f;
        int fd;

        if (nargs != 1) {
            return cli_usage_error("%s: expected FILE", cmd);
        }
        if (getentropy(raw, sizeof(raw)) != 0) {
            fprintf(stderr, "rl-cli: no randomness: %s\n", strerror(errno));
            return CLI_EXIT_FAIL;
        }
        rl_auth_format_hash(raw, token); /* 64 hex digits: 256 random bits */
        len = 2 * sizeof(raw);
        fd = open(args[0], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (f == NULL || fprintf(f, "%.*s\n", (int)len, token) < 0 || fclose(f) != 0) {
            fprintf(stderr, "rl-cli: cannot write %s: %s\n", args[0], strerror(errno));
            if (f == NULL && fd >= 0) {
                close(fd);
            }
            rl_auth_wipe(token, sizeof(token));
            return CLI_EXIT_FAIL;
        }
    } else {
        const char *path = nargs == 1 ? args[0] : o->token_file;

        if (nargs > 1 || path == NULL) {
            return cli_usage_error("%s: expected FILE (or --token-file FILE)", cmd);
        }
        rc = rl_auth_read_secret(path, RL_AUTH_TOKEN_MIN, token, sizeof(token), &len, why,
                                 sizeof(why));
        if (rc != 0) {
            fprintf(stderr, "rl-cli: %s\n", why);
            return CLI_EXIT_USAGE;
        }
    }
    rl_auth_sha256(token, len, h);
    rl_auth_format_hash(h, hex);
    printf("token_sha256 = %s\n", hex);
    rl_auth_wipe(token, sizeof(token));
    rl_auth_wipe(raw, sizeof(raw));
    return CLI_EXIT_OK;
}
