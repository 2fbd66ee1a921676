// Every admin route, in match order (fixed paths before parameterised ones of the same shape).
import type { Route } from '../route.js';
import apiDeliveryResend from './api-delivery-resend.js';
import apiEndpointAttempts from './api-endpoint-attempts.js';
import apiEndpointDelete from './api-endpoint-delete.js';
import apiEndpointDisable from './api-endpoint-disable.js';
import apiEndpointEnable from './api-endpoint-enable.js';
import apiEndpointGet from './api-endpoint-get.js';
import apiEndpointRotate from './api-endpoint-rotate.js';
import apiEndpointTest from './api-endpoint-test.js';
import apiEndpointUpdate from './api-endpoint-update.js';
import apiEndpointsCreate from './api-endpoints-create.js';
import apiEndpointsList from './api-endpoints-list.js';
import apiEventGet from './api-event-get.js';
import apiEventReplay from './api-event-replay.js';
import apiEventsList from './api-events-list.js';
import apiEventsRequeue from './api-events-requeue.js';
import apiEventsReplay from './api-events-replay.js';
import apiJobsCancel from './api-jobs-cancel.js';
import apiJobsDiscard from './api-jobs-discard.js';
import apiJobsList from './api-jobs-list.js';
import apiJobsRetry from './api-jobs-retry.js';
import apiOverview from './api-overview.js';
import healthz from './healthz.js';
import login from './login.js';
import logout from './logout.js';
import metrics from './metrics.js';
import pageEndpoint from './page-endpoint.js';
import pageEndpoints from './page-endpoints.js';
import pageEvent from './page-event.js';
import pageEvents from './page-events.js';
import pageJobs from './page-jobs.js';
import pageLogin from './page-login.js';
import pageOverview from './page-overview.js';

export const routes: Route[] = [
  healthz, metrics, login, logout, pageLogin,
  apiOverview,
  apiEventsList, apiEventsRequeue, apiEventsReplay, apiEventGet, apiEventReplay,
  apiJobsList, apiJobsRetry, apiJobsCancel, apiJobsDiscard,
  apiEndpointsList, apiEndpointsCreate, apiEndpointGet, apiEndpointEnable, apiEndpointDisable, apiEndpointRotate, apiEndpointTest, apiEndpointUpdate, apiEndpointDelete, apiEndpointAttempts,
  apiDeliveryResend,
  pageOverview, pageEvents, pageEvent, pageJobs, pageEndpoints, pageEndpoint,
];
