//! A principal's full identity (issue 11 item 8: an approval matched by id string alone): the
//! same id from another origin, or as a service rather than a person, is another identity.

use corral_policy::{Principal, PrincipalKind, PrincipalOrigin};

fn jwt(iss: &str, sub: &str) -> Principal {
    Principal::new(sub, &[]).with_origin(PrincipalOrigin::Jwt {
        issuer: iss.to_owned(),
    })
}

// issue 11 item 8: a JWT `sub: agent` and the static token `agent` are two callers.
#[test]
fn the_same_id_from_a_static_token_and_a_jwt_is_two_identities() {
    let token = Principal::new("agent", &[])
        .with_kind(PrincipalKind::Service)
        .with_origin(PrincipalOrigin::StaticToken);
    assert_eq!(token.identity(), "token:service:agent");
    let human = jwt("", "agent");
    assert_eq!(human.identity(), "jwt::person:agent");
    assert_ne!(token.identity(), human.identity());
    // The kind counts too: a service and a person of one issuer are not the same caller...
    assert_ne!(
        jwt("", "agent")
            .with_kind(PrincipalKind::Service)
            .identity(),
        human.identity()
    );
    // ...but an agent delegated by a person raises in that person's name.
    assert_eq!(
        jwt("", "agent")
            .with_kind(PrincipalKind::Delegated)
            .identity(),
        human.identity()
    );
    assert_eq!(Principal::anonymous().identity(), "anonymous");
    assert_eq!(Principal::new("ada", &[]).identity(), "local:person:ada");
}

#[test]
fn an_issuer_with_colons_cannot_be_confused_with_another_issuer_and_sub() {
    let a = jwt("https://idp.example", "ada");
    assert_eq!(a.identity(), "jwt:https%3A//idp.example:person:ada");
    // Without escaping both would read `jwt:a:b:person:c`... once `person:` is in the sub.
    let b = jwt("a:b", "c");
    let c = jwt("a", "b:person:c");
    assert_ne!(b.identity(), c.identity());
    assert_ne!(jwt("a%3Ab", "c").identity(), b.identity());
}
