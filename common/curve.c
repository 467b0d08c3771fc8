#include "curve.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

bool
zl_curve_enabled (const zl_curve_t *c)
{
    return c && c->server_public[0];
}

int
zl_curve_load (zl_curve_t *c, const char *server_cert, const char *client_cert, char *err,
               size_t errlen)
{
    memset (c, 0, sizeof *c);
    if (!server_cert && !client_cert)
        return 0;
    if (!server_cert || !client_cert) {
        snprintf (err, errlen,
                  "CURVE needs both the broker's public certificate and this "
                  "client's secret certificate");
        return -1;
    }
    zcert_t *server = zcert_load (server_cert);
    if (!server) {
        snprintf (err, errlen, "cannot load the broker certificate %s", server_cert);
        return -1;
    }
    zcert_t *me = zcert_load (client_cert);
    if (!me) {
        zcert_destroy (&server);
        snprintf (err, errlen, "cannot load the client certificate %s", client_cert);
        return -1;
    }
    snprintf (c->server_public, sizeof c->server_public, "%s", zcert_public_txt (server));
    snprintf (c->public_key, sizeof c->public_key, "%s", zcert_public_txt (me));
    snprintf (c->secret_key, sizeof c->secret_key, "%s", zcert_secret_txt (me));
    zcert_destroy (&server);
    zcert_destroy (&me);
    if (!strcmp (c->secret_key, "0000000000000000000000000000000000000000")) {
        snprintf (err, errlen, "%s holds no secret key: give the _secret file", client_cert);
        memset (c, 0, sizeof *c);
        return -1;
    }
    return 0;
}

void
zl_curve_apply (const zl_curve_t *c, void *zsock)
{
    if (!zl_curve_enabled (c))
        return;
    zsock_set_curve_serverkey (zsock, c->server_public);
    zsock_set_curve_publickey (zsock, c->public_key);
    zsock_set_curve_secretkey (zsock, c->secret_key);
}
