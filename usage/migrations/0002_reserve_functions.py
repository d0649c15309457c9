"""The reservation's two statements as server-side functions, so that reserving and settling
a call are one round trip each (usage.budgets)."""

from django.db import migrations

ROOM = """
CREATE OR REPLACE FUNCTION usage_room(
    lim_m bigint, lim_t bigint, used_m bigint, used_t bigint, p_input bigint,
    in_price numeric, out_price numeric
) RETURNS numeric LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    room numeric := 1099511627776;
    left_m numeric;
BEGIN
    IF lim_t IS NOT NULL THEN
        room := least(room, lim_t - used_t - p_input);
    END IF;
    IF lim_m IS NOT NULL THEN
        IF in_price IS NULL OR out_price IS NULL THEN
            RETURN -1;
        END IF;
        left_m := lim_m - used_m - p_input * in_price;
        IF left_m < 0 THEN
            RETURN -1;
        END IF;
        IF out_price > 0 THEN
            room := least(room, floor(left_m / out_price));
        END IF;
    END IF;
    RETURN room;
END $$;
"""

RESERVE = """
CREATE OR REPLACE FUNCTION usage_reserve(
    p_tenant uuid, p_budgets uuid[], p_subjects text[], p_starts bigint[],
    p_limit_micros bigint[], p_limit_tokens bigint[],
    p_input bigint, p_output bigint, p_min_output bigint,
    p_in_price numeric, p_out_price numeric,
    p_reservation uuid, p_thread uuid, p_turn uuid, p_lock_key text, p_lock_token text,
    p_now bigint
) RETURNS TABLE (r_allowed bigint, r_blocked integer, r_contended boolean,
                 r_ids bigint[], r_cells integer[], r_micros bigint)
LANGUAGE plpgsql AS $$
DECLARE
    rec record;
    room numeric;
    best bigint := p_output;
    ids bigint[] := '{}';
    cells integer[] := '{}';
    cost bigint;
BEGIN
    INSERT INTO usage_budgetcounter (tenant_id, budget_id, subject, window_start,
        spent_micros, spent_tokens, reserved_micros, reserved_tokens, announced)
    SELECT p_tenant, v.b, v.s, v.w, 0, 0, 0, 0, 0
    FROM unnest(p_budgets, p_subjects, p_starts) WITH ORDINALITY AS v(b, s, w, n)
    ORDER BY v.n
    ON CONFLICT (budget_id, subject, window_start) DO NOTHING;
    FOR rec IN
        SELECT c.id, v.n::integer AS n, c.spent_micros, c.spent_tokens,
               c.reserved_micros, c.reserved_tokens
        FROM usage_budgetcounter c
        JOIN unnest(p_budgets, p_subjects, p_starts) WITH ORDINALITY AS v(b, s, w, n)
          ON c.budget_id = v.b AND c.subject = v.s AND c.window_start = v.w
        ORDER BY c.id FOR UPDATE OF c
    LOOP
        room := usage_room(p_limit_micros[rec.n], p_limit_tokens[rec.n],
                           rec.spent_micros + rec.reserved_micros,
                           rec.spent_tokens + rec.reserved_tokens,
                           p_input, p_in_price, p_out_price);
        IF room < p_min_output THEN
            room := usage_room(p_limit_micros[rec.n], p_limit_tokens[rec.n],
                               rec.spent_micros, rec.spent_tokens,
                               p_input, p_in_price, p_out_price);
            RETURN QUERY SELECT 0::bigint, rec.n, room >= p_min_output, NULL::bigint[],
                                NULL::integer[], 0::bigint;
            RETURN;
        END IF;
        best := least(best::numeric, room)::bigint;
        ids := ids || rec.id;
        cells := cells || rec.n;
    END LOOP;
    cost := CASE WHEN p_in_price IS NULL OR p_out_price IS NULL THEN 0
                 ELSE ceil(p_input * p_in_price + best * p_out_price)::bigint END;
    UPDATE usage_budgetcounter c SET
        reserved_micros = c.reserved_micros
            + CASE WHEN p_limit_micros[x.n] IS NULL THEN 0 ELSE cost END,
        reserved_tokens = c.reserved_tokens + p_input + best
    FROM unnest(ids, cells) AS x(id, n) WHERE c.id = x.id;
    INSERT INTO usage_reservation (id, tenant_id, thread_id, turn_id, lock_key, lock_token,
        parts, created_at)
    SELECT p_reservation, p_tenant, p_thread, p_turn, p_lock_key, p_lock_token,
        jsonb_agg(jsonb_build_array(x.id,
            CASE WHEN p_limit_micros[x.n] IS NULL THEN 0 ELSE cost END, p_input + best)
            ORDER BY x.id),
        p_now
    FROM unnest(ids, cells) AS x(id, n);
    RETURN QUERY SELECT best, NULL::integer, false, ids, cells, cost;
END $$;
"""

SETTLE = """
CREATE OR REPLACE FUNCTION usage_settle(
    p_reservation uuid, p_ids bigint[], p_m bigint[], p_t bigint[],
    p_micros bigint, p_tokens bigint
) RETURNS TABLE (r_id bigint, r_spent_micros bigint, r_spent_tokens bigint,
                 r_announced integer)
LANGUAGE plpgsql AS $$
DECLARE
    held integer;
BEGIN
    PERFORM 1 FROM usage_budgetcounter c WHERE c.id = ANY(p_ids) ORDER BY c.id FOR UPDATE;
    DELETE FROM usage_reservation r WHERE r.id = p_reservation;
    GET DIAGNOSTICS held = ROW_COUNT;
    RETURN QUERY UPDATE usage_budgetcounter c SET
        reserved_micros = c.reserved_micros - CASE WHEN held > 0 THEN v.m ELSE 0 END,
        reserved_tokens = c.reserved_tokens - CASE WHEN held > 0 THEN v.t ELSE 0 END,
        spent_micros = c.spent_micros + p_micros,
        spent_tokens = c.spent_tokens + p_tokens
    FROM unnest(p_ids, p_m, p_t) AS v(id, m, t) WHERE c.id = v.id
    RETURNING c.id, c.spent_micros, c.spent_tokens, c.announced;
END $$;
"""

DROP = """
DROP FUNCTION IF EXISTS usage_settle(uuid, bigint[], bigint[], bigint[], bigint, bigint);
DROP FUNCTION IF EXISTS usage_reserve(uuid, uuid[], text[], bigint[], bigint[], bigint[], bigint,
    bigint, bigint, numeric, numeric, uuid, uuid, uuid, text, text, bigint);
DROP FUNCTION IF EXISTS usage_room(bigint, bigint, bigint, bigint, bigint, numeric, numeric);
"""


class Migration(migrations.Migration):
    dependencies = [("usage", "0001_initial")]

    operations = [migrations.RunSQL(ROOM + RESERVE + SETTLE, reverse_sql=DROP)]
