"""The Message Content intent: privileged, off until the operator turns it on, and without it Discord hands
a bot everyone's messages with empty content, attachments and embeds (developers/events/gateway.mdx,
"Message Content Intent"). No imports: the lean interactions function reads it for /memory status."""

# resources/application.mdx, application flags: the intent for apps in 100 or more servers (verified), and
# the one for apps in fewer
GATEWAY_MESSAGE_CONTENT, GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 18, 1 << 19

INTENT_OFF = (
    "⚠ I can't read message text: the bot's Message Content intent is off, so Discord gives me "
    "everyone's messages empty and none of yours can be stored. The bot's operator turns it on in the "
    "Developer Portal (Bot → Privileged Gateway Intents → Message Content Intent)."
)


def has_content_intent(application: dict[str, object]) -> bool:
    """Whether the application's flags grant it the Message Content intent."""
    flags = application.get("flags")
    return isinstance(flags, int) and bool(
        flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED)
    )
