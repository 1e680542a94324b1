;;; forj-provider-test.el --- Provider wire formats through real curl  -*- lexical-binding: t; -*-

;;; Commentary:

;; Each provider family against a local server (fake_provider.py) that
;; replays that family's streaming wire format, errors included; every
;; request goes through the real curl.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-epc-test)

(defvar forj-provider-test--server nil "The fake provider process.")
(defvar forj-provider-test--port nil "Its port.")
(defvar forj-provider-test--log nil "The file it logs requests to.")

(defconst forj-provider-test--dir
  (file-name-directory (or load-file-name buffer-file-name))
  "This directory.")

(defun forj-provider-test--server ()
  "Start the fake provider once; return its port."
  (unless (process-live-p forj-provider-test--server)
    (setq forj-provider-test--log (make-temp-file "forj-fake-log-")
          forj-provider-test--port nil)
    (setq forj-provider-test--server
          (make-process
           :name "forj-fake-provider" :noquery t :connection-type 'pipe
           :command (list forj-test--python
                          (expand-file-name "fake_provider.py" forj-provider-test--dir)
                          forj-provider-test--log)
           :filter (lambda (_p out)
                     (when (string-match "\\([0-9]+\\)" out)
                       (setq forj-provider-test--port (string-to-number (match-string 1 out)))))))
    (forj-test--wait-for (lambda () forj-provider-test--port) 20))
  forj-provider-test--port)

(defun forj-provider-test--provider (family case &rest more)
  "A provider of FAMILY pointed at the fake server's scenario CASE, plus MORE."
  (append (list :name (format "fake-%s" family) :family family :model "fake-model"
                :url (format "http://127.0.0.1:%d/%s-%s/v1" (forj-provider-test--server) family case)
                :key-env '("FORJ_TEST_PROVIDER_KEY"))
          more))

(defun forj-provider-test--run (provider &optional tools)
  "Run one request to PROVIDER; return (:text :calls :error :done :command)."
  (let* ((text "") (calls nil) (error nil) (done nil)
         (process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-SECRET-123" process-environment))
         (stream (forj-provider-start
                  provider "You are a test." (list (list :role "user" :text "Hi"))
                  tools
                  (list :on-text (lambda (s) (setq text (concat text s)))
                        :on-call (lambda (c) (push c calls))
                        :on-done (lambda () (setq done t))
                        :on-error (lambda (m) (setq error m))))))
    (forj-test--wait-for (lambda () (or done error)) 20)
    (list :text text :calls (nreverse calls) :error error :done done
          :command (and (forj-provider-stream-process stream)
                        (process-command (forj-provider-stream-process stream))))))

(defun forj-provider-test--last-request ()
  "The last request the fake server logged, as a plist."
  (with-temp-buffer
    (insert-file-contents forj-provider-test--log)
    (goto-char (point-max))
    (forward-line -1)
    (json-parse-string (buffer-substring (point) (line-end-position)) :object-type 'plist)))

(defconst forj-provider-test--tools
  [(:name "read_file" :description "Read a file"
          :parameters (:type "object" :properties (:path (:type "string")) :required ["path"]))]
  "A tool definition as the worker gives it.")

(defconst forj-provider-test--auth
  '((openai "authorization" "Bearer sk-test-SECRET-123")
    (anthropic "x-api-key" "sk-test-SECRET-123")
    (gemini "x-goog-api-key" "sk-test-SECRET-123"))
  "Where each family sends the key.")

(defun forj-provider-test--header (headers name)
  "The value of header NAME (any case) in the plist HEADERS."
  (cl-loop for (key value) on headers by #'cddr
           when (equal (downcase (substring (symbol-name key) 1)) name)
           return value))

(ert-deftest forj-test-provider-streams-text-in-each-family ()
  "Each family streams text to the end; the key goes in a header, never on curl's command line."
  (dolist (family '(openai anthropic gemini))
    (let ((run (forj-provider-test--run (forj-provider-test--provider family "text"))))
      (should (plist-get run :done))
      (should-not (plist-get run :error))
      (should (equal (plist-get run :text) "Hello, world"))
      (should-not (cl-some (lambda (arg) (string-match-p "SECRET" arg)) (plist-get run :command)))
      ;; The user's ~/.curlrc is not read (-q must come first).
      (should (equal (nth 1 (plist-get run :command)) "-q"))
      (let* ((request (forj-provider-test--last-request))
             (headers (plist-get request :headers))
             (auth (alist-get family forj-provider-test--auth)))
        (should (equal (forj-provider-test--header headers (car auth)) (cadr auth)))
        (should (string-match-p "You are a test" (plist-get request :body)))
        (pcase family
          ('openai (should (string-suffix-p "/v1/chat/completions" (plist-get request :path))))
          ('anthropic (should (string-suffix-p "/v1/messages" (plist-get request :path)))
                      (should (equal (forj-provider-test--header headers "anthropic-version")
                                     "2023-06-01")))
          ('gemini (should (string-suffix-p "/models/fake-model:streamGenerateContent?alt=sse"
                                            (plist-get request :path)))))))))

(ert-deftest forj-test-provider-native-calls-are-normalized ()
  "Native function calls of each family arrive as (:id :name :args) with whole arguments."
  (dolist (family '(openai anthropic gemini))
    (let* ((run (forj-provider-test--run
                 (forj-provider-test--provider family "tools" :native-tools t)
                 forj-provider-test--tools))
           (call (car (plist-get run :calls)))
           (body (plist-get (forj-provider-test--last-request) :body)))
      (should (plist-get run :done))
      (should (= (length (plist-get run :calls)) 1))
      (should (equal (plist-get call :name) "read_file"))
      (should (stringp (plist-get call :id)))
      (should (equal (forj-tools-json-encode (plist-get call :args)) "{\"path\":\"a.txt\"}"))
      ;; The tools were advertised in the family's own shape.
      (should (string-match-p (pcase family
                                ('openai "\"tools\":\\[{\"type\":\"function\"")
                                ('anthropic "\"input_schema\"")
                                ('gemini "\"functionDeclarations\""))
                              body)))))

(ert-deftest forj-test-provider-http-errors-show-the-providers-message ()
  "401, 429 with Retry-After, an HTML 502: the provider's own words reach the user."
  (dolist (family '(openai anthropic gemini))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "unauthorized"))
                          :error)))
      (should (string-match-p "HTTP 401 (the API key was refused): Incorrect API key provided" err)))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "ratelimited"))
                          :error)))
      (should (string-match-p "HTTP 429 (rate limited): Rate limit reached, slow down" err))
      (should (string-match-p "retry after 7 seconds" err)))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "html")) :error)))
      (should (string-match-p "HTTP 502 (the provider failed): 502 Bad Gateway" err))
      (should-not (string-match-p "<h1>" err)))))

(ert-deftest forj-test-provider-broken-streams ()
  "An empty body, a page that is not a stream, a stream cut mid-event: each is a clear error."
  (dolist (family '(openai anthropic gemini))
    (should (string-match-p "reply was empty"
                            (plist-get (forj-provider-test--run (forj-provider-test--provider family "empty"))
                                       :error)))
    (should (string-match-p "not an event stream: Sign in to continue"
                            (plist-get (forj-provider-test--run (forj-provider-test--provider family "notsse"))
                                       :error)))
    (let ((run (forj-provider-test--run (forj-provider-test--provider family "cut"))))
      (should (string-match-p "cut before it finished" (plist-get run :error)))
      ;; What arrived before the cut is kept.
      (should (string-prefix-p (if (eq family 'anthropic) "Hello" "Half a") (plist-get run :text))))))

(ert-deftest forj-test-provider-invalid-utf-8-is-shown-not-fatal ()
  "Invalid UTF-8 in a stream becomes U+FFFD; the reply completes."
  (dolist (family '(openai anthropic gemini))
    (let ((run (forj-provider-test--run (forj-provider-test--provider family "badutf8"))))
      (should (plist-get run :done))
      (should (string-match-p "caf\ufffd \ufffd" (plist-get run :text))))))

(ert-deftest forj-test-provider-anthropic-error-event ()
  "An error event in the middle of a stream ends it with the provider's message."
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'anthropic "overloaded"))))
    (should (equal (plist-get run :text) "Hello"))
    (should (equal (plist-get run :error) "Overloaded (overloaded_error)"))))

(ert-deftest forj-test-provider-no-key-and-no-server ()
  "A missing key names the variables to set; a refused connection is curl's own message."
  (let ((err (plist-get (forj-provider-test--run
                         (list :name "nokey" :family 'openai :model "m" :url "http://127.0.0.1:9/v1"
                               :key-env '("FORJ_TEST_NO_SUCH_KEY")))
                        :error)))
    (should (string-match-p "No API key for nokey: set one of FORJ_TEST_NO_SUCH_KEY" err)))
  (let ((err (plist-get (forj-provider-test--run
                         (list :name "local" :family 'openai :model "m" :url "http://127.0.0.1:9/v1"
                               :local t))
                        :error)))
    (should (string-match-p "curl exit 7" err))))

(provide 'forj-provider-test)
;;; forj-provider-test.el ends here
