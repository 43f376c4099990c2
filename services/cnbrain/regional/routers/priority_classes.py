"""The priority classes: anyone authenticated lists and reads them; staff put and delete
them (`cnbrain.regional.use_cases.priority_classes` says what each refuses; in a federation
through the national brain). They order the admission queue."""

from fastapi import APIRouter, Response

from cnbrain.regional.deps import PrincipalDep, PriorityClassesDep, StaffDep
from cnbrain.regional.problems import responses
from cnbrain.regional.use_cases.priority_classes import PriorityClassBody, PriorityClassView

router = APIRouter(prefix="/v1", tags=["priority classes"])

ERRORS = responses(
    {
        401: "No valid API key.",
        403: "Only operators and admins put and delete classes.",
        404: "No such priority class.",
        409: "A value another class has; the default class deleted or put without "
        "`default: true`; a class that requests not yet ended name deleted.",
        422: "Malformed; `errors` names the field and its bounds.",
        503: "In a federation: the national brain, which holds the classes, cannot be "
        "reached; nothing changed.",
    }
)


@router.get(
    "/priority-classes",
    response_model=list[PriorityClassView],
    responses=ERRORS,
    summary="The priority classes, highest value first",
)
async def list_classes(_: PrincipalDep, classes: PriorityClassesDep) -> list[PriorityClassView]:
    """Every priority class, highest value first: its value, whether its requests may be
    preempted, its default wait bound, and which is the default."""
    return await classes.list_classes()


@router.get(
    "/priority-classes/{name}",
    response_model=PriorityClassView,
    responses=ERRORS,
    summary="A priority class",
)
async def get_class(name: str, _: PrincipalDep, classes: PriorityClassesDep) -> PriorityClassView:
    """One priority class by name; 404 when there is none."""
    return await classes.get_class(name)


@router.put(
    "/priority-classes/{name}",
    response_model=PriorityClassView,
    responses={
        **ERRORS,
        201: {"model": PriorityClassView, "description": "The class is new."},
    },
    summary="Create or replace a priority class",
)
async def put_class(
    name: str,
    body: PriorityClassBody,
    response: Response,
    principal: StaffDep,
    classes: PriorityClassesDep,
) -> PriorityClassView:
    """Staff only. Creates (201) or replaces (200) the class. Values are unique; exactly one
    class is the default. In a federation the national brain holds the classes."""
    view, created = await classes.put_class(principal, name, body)
    if created:
        response.status_code = 201
    return view


@router.delete(
    "/priority-classes/{name}",
    status_code=204,
    responses=ERRORS,
    summary="Delete a priority class",
)
async def delete_class(name: str, principal: StaffDep, classes: PriorityClassesDep) -> None:
    """Staff only. Deletes a class that no live request names and that is not the default (409
    otherwise)."""
    await classes.delete_class(principal, name)
