#include "text/text_impl.h"
lares_status text_bpe_load(text_vocab *v, const gguf_file *f, lares_error *err) {
    (void)v;
    return lares_fail(err, LARES_EUNSUPPORTED, "%s: gpt2 not yet", gguf_path(f));
}
lares_status text_bpe_tokenize(const text_vocab *v, const char *text, bool add_special,
                               text_work *w, lares_error *err) {
    (void)v; (void)text; (void)add_special; (void)w;
    return lares_fail(err, LARES_EUNSUPPORTED, "gpt2 not yet");
}
