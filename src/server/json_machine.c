/*
 * The byte automaton of structured output (schema.h): a pushdown machine
 * whose stack holds one frame per value being written. It takes compact
 * JSON only: no whitespace (a model cannot loop on spaces), no \u escapes
 * (raw UTF-8 says the same, and "\u0000" or a lone surrogate would not
 * parse everywhere), UTF-8 checked byte by byte (overlong forms and
 * surrogates refused), numbers with at most SCHEMA_MAX_DIGITS digits in the
 * integer part and in the fraction.
 *
 * A number or a literal that may go on (an enum of 1 and 12) ends when a
 * byte it cannot take arrives: the frame is popped and the byte goes to the
 * value around it.
 */
#include "core/core.h"
#include "server/schema.h"

enum { O_OPEN, O_KEY, O_COLON, O_VALUE, O_AFTER, O_NEXTKEY };
enum { A_OPEN, A_ITEM, A_AFTER, A_NEXT };
enum { S_CHARS, S_ESC, S_UTF8 };
enum { K_OPEN, K_NAME, K_MID, K_ARGS, K_CLOSE };
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static bool has_start(const schema_node *n, uint8_t b) {
    return (n->starts[b >> 3] >> (b & 7)) & 1;
}

static bool is_digit(uint8_t b) {
    return b >= '0' && b <= '9';
}

/* object frames: a schema object, or a free-form one (node ANY or free_form) */
static bool free_object(const server_schema *s, const jm_frame *f) {
    return s->nodes[f->node].kind == SCHEMA_ANY || s->nodes[f->node].free_form;
}

static const schema_prop *prop(const server_schema *s, const jm_frame *f, uint32_t i) {
    return &s->props[s->nodes[f->node].first + (int32_t)i];
}

static uint32_t n_props(const server_schema *s, const jm_frame *f) {
    return (uint32_t)s->nodes[f->node].count;
}

/* bytes the required properties from i on need, with their commas */
static size_t rest(const server_schema *s, const jm_frame *f, uint32_t i) {
    return i < n_props(s, f) ? prop(s, f, i)->rest : 0;
}

/* a required property at i or later: the object cannot close yet */
static bool required_left(const server_schema *s, const jm_frame *f) {
    return rest(s, f, f->next) > 0;
}

/* the properties a key may name now: from next up to the first required one */
static uint64_t key_candidates(const server_schema *s, const jm_frame *f) {
    uint64_t m = 0;
    for (uint32_t i = f->next; i < n_props(s, f); i++) {
        m |= (uint64_t)1 << i;
        if (prop(s, f, i)->required) {
            break;
        }
    }
    return m;
}

static bool push(jm_state *st, int32_t node) {
    if (st->depth >= SCHEMA_MAX_DEPTH) {
        return false;
    }
    jm_frame *f = &st->f[st->depth++];
    memset(f, 0, sizeof *f);
    f->node = node;
    f->kind = JM_START;
    return true;
}

/* the top frame's value is complete */
static void pop(jm_state *st) {
    st->depth--;
    if (st->depth == 0) {
        st->done = true;
        return;
    }
    jm_frame *p = &st->f[st->depth - 1];
    if (p->kind == JM_OBJECT) {
        p->st = p->st == O_KEY ? O_COLON : O_AFTER;
    } else if (p->kind == JM_ARRAY) {
        p->count++;
        p->st = A_AFTER;
    } else if (p->kind == JM_CALL && p->st == K_NAME) {
        /* the name read (the popped frame, still in place) picks the arguments */
        const jm_frame *name = &st->f[st->depth];
        p->next = name->alive ? (uint32_t)__builtin_ctzll(name->alive) : 0;
        p->st = K_MID;
        p->count = 0;
    } else if (p->kind == JM_CALL) {
        p->st = K_CLOSE;
    }
}

void server_jm_init(const server_schema *s, jm_state *st) {
    st->depth = 0;
    st->done = false;
    push(st, s->root);
}

static bool number_accepting(const jm_frame *f) {
    return f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
}

/* the literals of the frame's node that are complete at f->count */
static bool literal_complete(const server_schema *s, const jm_frame *f) {
    const schema_node *n = &s->nodes[f->node];
    for (int32_t i = 0; i < n->count; i++) {
        if (((f->alive >> i) & 1) && s->lit_len[n->first + i] == f->count) {
            return true;
        }
    }
    return false;
}

/* starts a string frame in place, its quote read */
static void begin_string(jm_frame *f, int32_t node) {
    f->node = node;
    f->kind = JM_STRING;
    f->st = S_CHARS;
    f->count = 0;
    f->next = 0;
}

/* one byte into a string frame; pops it at the closing quote */
static bool feed_string(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const schema_node *n = &s->nodes[f->node];
    const bool room = n->max_n < 0 || (int64_t)f->count < n->max_n;
    switch (f->st) {
    case S_CHARS:
        if (b == '"') {
            if ((int64_t)f->count < n->min_n) {
                return false;
            }
            pop(st);
            return true;
        }
        if (b < 0x20 || !room) {
            return false;
        }
        f->count++;
        if (b == '\\') {
            f->st = S_ESC;
        } else if (b >= 0x80) {
            f->st = S_UTF8;
            f->lo = 0x80;
            f->hi = 0xBF;
            if (b >= 0xC2 && b <= 0xDF) {
                f->next = 1;
            } else if (b >= 0xE0 && b <= 0xEF) {
                f->next = 2;
                f->lo = b == 0xE0 ? 0xA0 : 0x80; /* no overlong forms */
                f->hi = b == 0xED ? 0x9F : 0xBF; /* no surrogates */
            } else if (b >= 0xF0 && b <= 0xF4) {
                f->next = 3;
                f->lo = b == 0xF0 ? 0x90 : 0x80;
                f->hi = b == 0xF4 ? 0x8F : 0xBF; /* nothing past U+10FFFF */
            } else {
                return false;
            }
        }
        return true;
    case S_ESC:
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
            b == 't') {
            f->st = S_CHARS;
            return true;
        }
        return false;
    default: /* S_UTF8 */
        if (b < f->lo || b > f->hi) {
            return false;
        }
        f->lo = 0x80;
        f->hi = 0xBF;
        if (--f->next == 0) {
            f->st = S_CHARS;
        }
        return true;
    }
}

typedef enum step { STEP_TAKEN, STEP_REFUSED, STEP_AGAIN } step;

/* one byte into a number frame; STEP_AGAIN: the number ended before b */
static step feed_number(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const bool integer = s->nodes[f->node].kind == SCHEMA_INTEGER;
    const bool digit = is_digit(b);
    switch (f->st) {
    case N_START:
    case N_MINUS:
        if (b == '-' && f->st == N_START) {
            f->st = N_MINUS;
            return STEP_TAKEN;
        }
        if (!digit) {
            return STEP_REFUSED;
        }
        f->st = b == '0' ? N_ZERO : N_INT;
        f->count = 1;
        return STEP_TAKEN;
    case N_DOT:
        if (!digit) {
            return STEP_REFUSED;
        }
        f->st = N_FRAC;
        f->count = 1;
        return STEP_TAKEN;
    case N_E:
        if (b == '+' || b == '-') {
            f->st = N_ESIGN;
            return STEP_TAKEN;
        }
        /* fall through */
    case N_ESIGN:
        if (!digit) {
            return STEP_REFUSED;
        }
        f->st = N_EXP;
        f->count = 1;
        return STEP_TAKEN;
    default:
        break;
    }
    /* accepting states: N_ZERO, N_INT, N_FRAC, N_EXP */
    if (digit && f->st != N_ZERO) {
        const uint32_t cap = f->st == N_EXP ? SCHEMA_MAX_EXP : SCHEMA_MAX_DIGITS;
        if (f->count >= cap) {
            return STEP_REFUSED;
        }
        f->count++;
        return STEP_TAKEN;
    }
    if (!integer && b == '.' && (f->st == N_ZERO || f->st == N_INT)) {
        f->st = N_DOT;
        return STEP_TAKEN;
    }
    if (!integer && (b == 'e' || b == 'E') && f->st != N_EXP) {
        f->st = N_E;
        return STEP_TAKEN;
    }
    if (digit) { /* after a leading zero */
        return STEP_REFUSED;
    }
    pop(st);
    return STEP_AGAIN;
}

static step feed_literal(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const schema_node *n = &s->nodes[f->node];
    uint64_t next = 0;
    for (int32_t i = 0; i < n->count; i++) {
        const int32_t k = n->first + i;
        if (((f->alive >> i) & 1) && s->lit_len[k] > f->count &&
            (uint8_t)s->lits[k][f->count] == b) {
            next |= (uint64_t)1 << i;
        }
    }
    if (next == 0) {
        if (literal_complete(s, f)) {
            pop(st);
            return STEP_AGAIN;
        }
        return STEP_REFUSED;
    }
    f->alive = next;
    f->count++;
    for (int32_t i = 0; i < n->count; i++) {
        if (((next >> i) & 1) && s->lit_len[n->first + i] > f->count) {
            return STEP_TAKEN; /* one may go on */
        }
    }
    pop(st); /* every one left is complete */
    return STEP_TAKEN;
}

/* the first byte of a value: the frame becomes the value's kind */
static step feed_start(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const schema_node *n = &s->nodes[f->node];
    if (!has_start(n, b)) {
        return STEP_REFUSED;
    }
    switch (n->kind) {
    case SCHEMA_UNION:
        for (int32_t i = 0; i < n->count; i++) {
            const int32_t alt = s->alts[n->first + i];
            if (has_start(&s->nodes[alt], b)) {
                f->node = alt;
                return STEP_AGAIN;
            }
        }
        return STEP_REFUSED;
    case SCHEMA_ANY:
        if (b == '"') {
            begin_string(f, SCHEMA_NODE_STRING);
            return STEP_TAKEN;
        }
        if (b == 't' || b == 'f' || b == 'n') {
            f->node = SCHEMA_NODE_WORDS;
            return STEP_AGAIN;
        }
        if (b == '{' || b == '[') {
            if (st->depth >= SCHEMA_MAX_DEPTH) {
                return STEP_REFUSED; /* no room for what it would hold */
            }
            f->kind = b == '{' ? JM_OBJECT : JM_ARRAY;
            f->st = b == '{' ? O_OPEN : A_OPEN;
            return STEP_TAKEN;
        }
        f->kind = JM_NUMBER; /* node ANY: a number, not only an integer */
        f->st = N_START;
        return STEP_AGAIN;
    case SCHEMA_OBJECT:
        f->kind = JM_OBJECT;
        f->st = O_OPEN;
        f->next = 0;
        return STEP_TAKEN;
    case SCHEMA_ARRAY:
        f->kind = JM_ARRAY;
        f->st = A_OPEN;
        f->count = 0;
        return STEP_TAKEN;
    case SCHEMA_STRING:
        begin_string(f, f->node);
        return STEP_TAKEN;
    case SCHEMA_NUMBER:
    case SCHEMA_INTEGER:
        f->kind = JM_NUMBER;
        f->st = N_START;
        return STEP_AGAIN;
    case SCHEMA_CALL:
        f->kind = JM_CALL;
        f->st = K_OPEN;
        f->count = 0;
        return STEP_AGAIN;
    case SCHEMA_LITERALS:
        f->kind = JM_LITERAL;
        f->count = 0;
        f->alive = n->count >= 64 ? UINT64_MAX : ((uint64_t)1 << n->count) - 1;
        return STEP_AGAIN;
    }
    return STEP_REFUSED;
}

/* a key's first byte (the quote), or the end of a free-form object's key */
static step begin_key(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    if (b != '"') {
        return STEP_REFUSED;
    }
    f->st = O_KEY;
    if (free_object(s, f)) {
        if (!push(st, SCHEMA_NODE_STRING)) {
            return STEP_REFUSED;
        }
        begin_string(&st->f[st->depth - 1], SCHEMA_NODE_STRING);
        return STEP_TAKEN;
    }
    f->alive = key_candidates(s, f);
    f->count = 1;
    return f->alive ? STEP_TAKEN : STEP_REFUSED;
}

static step feed_object(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const bool free = free_object(s, f);
    switch (f->st) {
    case O_OPEN:
        if (b == '}') {
            if (!free && required_left(s, f)) {
                return STEP_REFUSED;
            }
            pop(st);
            return STEP_TAKEN;
        }
        return begin_key(s, st, f, b);
    case O_NEXTKEY:
        return begin_key(s, st, f, b);
    case O_KEY: { /* a schema object's key (a free-form key is a string frame) */
        uint64_t next = 0;
        int32_t done = -1;
        for (uint32_t i = f->next; i < n_props(s, f); i++) {
            const schema_prop *p = prop(s, f, i);
            if (((f->alive >> i) & 1) && p->key_len > f->count && (uint8_t)p->key[f->count] == b) {
                next |= (uint64_t)1 << i;
                if (p->key_len == f->count + 1) {
                    done = (int32_t)i; /* keys end with a quote: no key is another's prefix */
                }
            }
        }
        if (next == 0) {
            return STEP_REFUSED;
        }
        f->alive = next;
        f->count++;
        if (done >= 0) {
            f->next = (uint32_t)done + 1;
            f->alive = (uint64_t)prop(s, f, (uint32_t)done)->node;
            f->st = O_COLON;
        }
        return STEP_TAKEN;
    }
    case O_COLON:
        if (b != ':') {
            return STEP_REFUSED;
        }
        f->st = O_VALUE;
        return push(st, free ? SCHEMA_NODE_ANY : (int32_t)f->alive) ? STEP_TAKEN : STEP_REFUSED;
    case O_AFTER:
        if (b == '}') {
            if (!free && required_left(s, f)) {
                return STEP_REFUSED;
            }
            pop(st);
            return STEP_TAKEN;
        }
        if (b == ',' && (free || f->next < n_props(s, f))) {
            f->st = O_NEXTKEY;
            return STEP_TAKEN;
        }
        return STEP_REFUSED;
    default:
        return STEP_REFUSED; /* O_VALUE: the value's frame is on top */
    }
}

static step feed_array(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const schema_node *n = &s->nodes[f->node];
    const bool free = n->kind == SCHEMA_ANY;
    const int64_t lo = free ? 0 : n->min_n, hi = free ? -1 : n->max_n;
    const int32_t item = free ? SCHEMA_NODE_ANY : n->items;
    switch (f->st) {
    case A_OPEN:
        if (b == ']') {
            if (lo > 0) {
                return STEP_REFUSED;
            }
            pop(st);
            return STEP_TAKEN;
        }
        if (hi == 0) {
            return STEP_REFUSED;
        }
        f->st = A_ITEM;
        return push(st, item) ? STEP_AGAIN : STEP_REFUSED;
    case A_NEXT:
        f->st = A_ITEM;
        return push(st, item) ? STEP_AGAIN : STEP_REFUSED;
    case A_AFTER:
        if (b == ']' && (int64_t)f->count >= lo) {
            pop(st);
            return STEP_TAKEN;
        }
        if (b == ',' && (hi < 0 || (int64_t)f->count < hi)) {
            f->st = A_NEXT;
            return STEP_TAKEN;
        }
        return STEP_REFUSED;
    default:
        return STEP_REFUSED;
    }
}

/* a function call: the literal {"name":, a name, the literal ,"arguments":,
 * the arguments of that function, } */
static step feed_call(const server_schema *s, jm_state *st, jm_frame *f, uint8_t b) {
    const schema_node *n = &s->nodes[f->node];
    if (f->st == K_CLOSE) {
        if (b != '}') {
            return STEP_REFUSED;
        }
        pop(st);
        return STEP_TAKEN;
    }
    if (f->st != K_OPEN && f->st != K_MID) {
        return STEP_REFUSED; /* K_NAME, K_ARGS: their frame is on top */
    }
    const int32_t lit = f->st == K_OPEN ? n->lit_open : n->lit_mid;
    if ((uint8_t)s->lits[lit][f->count] != b) {
        return STEP_REFUSED;
    }
    if (++f->count < s->lit_len[lit]) {
        return STEP_TAKEN;
    }
    const int32_t child = f->st == K_OPEN ? n->items : s->alts[n->first + (int32_t)f->next];
    f->st = f->st == K_OPEN ? K_NAME : K_ARGS;
    return push(st, child) ? STEP_TAKEN : STEP_REFUSED;
}

bool server_jm_feed(const server_schema *s, jm_state *st, uint8_t b) {
    for (int guard = 0; guard < 4 * SCHEMA_MAX_DEPTH + 8; guard++) {
        if (st->depth == 0) {
            return false; /* the value is whole: nothing may follow */
        }
        jm_frame *f = &st->f[st->depth - 1];
        step r = STEP_REFUSED;
        switch ((jm_frame_kind)f->kind) {
        case JM_START:
            r = feed_start(s, st, f, b);
            break;
        case JM_OBJECT:
            r = feed_object(s, st, f, b);
            break;
        case JM_ARRAY:
            r = feed_array(s, st, f, b);
            break;
        case JM_STRING:
            r = feed_string(s, st, f, b) ? STEP_TAKEN : STEP_REFUSED;
            break;
        case JM_NUMBER:
            r = feed_number(s, st, f, b);
            break;
        case JM_LITERAL:
            r = feed_literal(s, st, f, b);
            break;
        case JM_CALL:
            r = feed_call(s, st, f, b);
            break;
        }
        if (r != STEP_AGAIN) {
            return r == STEP_TAKEN;
        }
    }
    return false;
}

bool server_jm_accepting(const server_schema *s, const jm_state *st) {
    if (st->depth == 0) {
        return st->done;
    }
    if (st->depth > 1) {
        return false;
    }
    const jm_frame *f = &st->f[0];
    return (f->kind == JM_NUMBER && number_accepting(f)) ||
           (f->kind == JM_LITERAL && literal_complete(s, f));
}

/* a call frame's bytes; in K_NAME with the name's frame, the two together
 * (the arguments' length depends on the name) */
static size_t call_cost(const server_schema *s, const jm_frame *f, const jm_frame *name) {
    const schema_node *n = &s->nodes[f->node];
    const size_t mid = s->lit_len[n->lit_mid];
    switch (f->st) {
    case K_OPEN:
        return n->min_bytes - f->count;
    case K_MID:
        return mid - f->count + s->nodes[s->alts[n->first + (int32_t)f->next]].min_bytes + 1;
    case K_NAME: {
        const schema_node *names = &s->nodes[n->items];
        size_t best = SIZE_MAX;
        for (int32_t i = 0; i < n->count; i++) {
            if (name == NULL || name->kind != JM_LITERAL || ((name->alive >> i) & 1)) {
                const size_t at = name != NULL && name->kind == JM_LITERAL ? name->count : 0;
                best = LARES_MIN(best, s->lit_len[names->first + i] - at + mid +
                                           s->nodes[s->alts[n->first + i]].min_bytes + 1);
            }
        }
        return best;
    }
    default: /* K_ARGS, K_CLOSE */
        return 1;
    }
}

/* bytes the frame needs at least to be complete; its child (if any) aside */
static size_t frame_cost(const server_schema *s, const jm_frame *f) {
    const schema_node *n = &s->nodes[f->node];
    switch ((jm_frame_kind)f->kind) {
    case JM_START:
        return n->min_bytes;
    case JM_OBJECT: {
        if (free_object(s, f)) {
            static const size_t cost[] = {[O_OPEN] = 1,  [O_KEY] = 3,   [O_COLON] = 3,
                                          [O_VALUE] = 1, [O_AFTER] = 1, [O_NEXTKEY] = 5};
            return cost[f->st];
        }
        switch (f->st) {
        case O_OPEN:
            return rest(s, f, f->next) > 0 ? rest(s, f, f->next) : 1;
        case O_VALUE:
        case O_AFTER:
            return rest(s, f, f->next) + 1;
        case O_COLON:
            return 1 + s->nodes[f->alive].min_bytes + rest(s, f, f->next) + 1;
        default: { /* O_NEXTKEY, O_KEY: the cheapest key still possible */
            const uint64_t cands = f->st == O_KEY ? f->alive : key_candidates(s, f);
            const uint32_t at = f->st == O_KEY ? f->count : 0;
            size_t best = SIZE_MAX;
            for (uint32_t i = f->next; i < n_props(s, f); i++) {
                if ((cands >> i) & 1) {
                    const schema_prop *p = prop(s, f, i);
                    size_t c =
                        p->key_len - at + 1 + s->nodes[p->node].min_bytes + rest(s, f, i + 1);
                    best = LARES_MIN(best, c);
                }
            }
            return best == SIZE_MAX ? 1 : best + 1;
        }
        }
    }
    case JM_ARRAY: {
        const bool free = n->kind == SCHEMA_ANY;
        const size_t lo = free ? 0 : (size_t)n->min_n;
        const size_t m = s->nodes[free ? SCHEMA_NODE_ANY : n->items].min_bytes + 1;
        size_t have = f->count + (f->st == A_ITEM);
        size_t need = lo > have ? lo - have : 0;
        switch (f->st) {
        case A_OPEN:
            return lo == 0 ? 1 : lo * m;
        case A_NEXT:
            return LARES_MAX(need, (size_t)1) * m;
        default:
            return need * m + 1;
        }
    }
    case JM_STRING: {
        const size_t lo = (size_t)n->min_n;
        const size_t chars = lo > f->count ? lo - f->count : 0;
        return chars + 1 + (f->st == S_ESC ? 1 : f->st == S_UTF8 ? f->next : 0);
    }
    case JM_NUMBER:
        return number_accepting(f) ? 0 : 1;
    case JM_LITERAL: {
        size_t best = SIZE_MAX;
        for (int32_t i = 0; i < n->count; i++) {
            if ((f->alive >> i) & 1) {
                best = LARES_MIN(best, s->lit_len[n->first + i] - f->count);
            }
        }
        return best == SIZE_MAX ? 0 : best;
    }
    case JM_CALL:
        return call_cost(s, f, NULL);
    }
    return 0;
}

size_t server_jm_min_finish(const server_schema *s, const jm_state *st) {
    size_t total = 0;
    for (int32_t i = 0; i < st->depth; i++) {
        const jm_frame *f = &st->f[i];
        if (f->kind == JM_CALL && f->st == K_NAME) { /* with the name being read */
            total += call_cost(s, f, i + 1 < st->depth ? &st->f[i + 1] : NULL);
            i++;
            continue;
        }
        total += frame_cost(s, f);
    }
    return total;
}

int server_jm_closing_byte(const server_schema *s, const jm_state *st) {
    const size_t need = server_jm_min_finish(s, st);
    if (need == 0) {
        return -1;
    }
    jm_state tmp;
    for (int b = 0; b < 256; b++) {
        server_jm_copy(&tmp, st);
        if (server_jm_feed(s, &tmp, (uint8_t)b) && server_jm_min_finish(s, &tmp) == need - 1) {
            return b;
        }
    }
    return -1;
}

int server_jm_allowed(const server_schema *s, const jm_state *st, uint8_t out[256]) {
    int n = 0;
    jm_state tmp;
    for (int b = 0; b < 256; b++) {
        server_jm_copy(&tmp, st);
        if (server_jm_feed(s, &tmp, (uint8_t)b)) {
            out[n++] = (uint8_t)b;
        }
    }
    return n;
}
