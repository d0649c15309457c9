from django.db import migrations, models


class Migration(migrations.Migration):
    """The per-thread message counter, started at each thread's newest seq."""

    dependencies = [
        ("threads", "0002_engine_fields"),
    ]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="message_seq",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunSQL(
            "UPDATE threads_thread SET message_seq = COALESCE("
            "(SELECT MAX(seq) FROM threads_message WHERE thread_id = threads_thread.id), 0)",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
